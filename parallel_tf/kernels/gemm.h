// C = A B in float32, each element of C summed over k in order, term 0 first, by fused multiply-adds
// (c = a_k * b_k + c, rounded once): its bits follow only the inputs, never the blocking, the thread count or
// the CPU, on every x86-64 CPU with AVX2 and FMA. A 6 x 16 block of C is held in registers over a block of KC
// terms, then stored, and loaded again for the next block of terms: storing and loading round nothing, so cutting
// k into blocks does not change the order of any sum. Where the CPU has AVX-512F, a 6 x 32 block in 16-float
// registers (twice the work an instruction): each element's sum is the same chain of the same FMAs, so the same bits.
//
// A and B are sources of elements: a matrix in memory (any strides: a transpose is a swap of them), read where
// it lies where it can be, or the windows of an image (windows.h: a convolution's operand, as A or as B), copied a
// panel at a time where the kernel reads them, never written out whole.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

namespace portable {

constexpr int64_t MR = 6, NR = 16, KC = 256, MC = 96, NC = 1024;

// Where the kernel reads a panel: a(i, p) = a[i * a_rows + p * a_terms].
struct PanelA {
  const float* a;
  int64_t rows, terms;
};

// A matrix in memory: element (i, j) at data[i * row_stride + j * col_stride].
struct Matrix {
  const float* data;
  int64_t row_stride, col_stride;

  const float* at(int64_t i, int64_t j) const { return data + i * row_stride + j * col_stride; }
  // As A: rows [i0, i0 + rows), terms [p0, p0 + kc) into panel[p * MR + i], zeros past the rows.
  void pack_rows(int64_t i0, int64_t rows, int64_t p0, int64_t kc, float* panel) const {
    std::fill(panel, panel + kc * MR, 0.0f);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t p = 0; p < kc; ++p) panel[p * MR + i] = *at(i0 + i, p0 + p);
  }
  PanelA packed(const float* panel, int64_t) const { return {panel, 1, MR}; }  // how the kernel reads pack_rows's
  // As B: terms [p0, p0 + kc), columns [j0, j0 + cols) into panel[p * NR + j], zeros past the columns.
  void pack_columns(int64_t p0, int64_t kc, int64_t j0, int64_t cols, float* panel) const {
    if (cols < NR) std::fill(panel, panel + kc * NR, 0.0f);
    for (int64_t j = 0; j < cols; ++j)
      for (int64_t p = 0; p < kc; ++p) panel[p * NR + j] = *at(p0 + p, j0 + j);
  }
};

// c[MR x NR] (row stride ldc) = (first ? 0 : c) + the sum over kc terms, in order, of a(i, p) * b(p, j), where
// b(p, j..j+15) = b[p * b_terms ..].
inline void kernel(int64_t kc, PanelA panel, const float* b, int64_t b_terms, float* c, int64_t ldc, bool first) {
  __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
  if (first) {
    c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_ps();
  } else {
    c00 = _mm256_loadu_ps(c + 0 * ldc), c01 = _mm256_loadu_ps(c + 0 * ldc + 8);
    c10 = _mm256_loadu_ps(c + 1 * ldc), c11 = _mm256_loadu_ps(c + 1 * ldc + 8);
    c20 = _mm256_loadu_ps(c + 2 * ldc), c21 = _mm256_loadu_ps(c + 2 * ldc + 8);
    c30 = _mm256_loadu_ps(c + 3 * ldc), c31 = _mm256_loadu_ps(c + 3 * ldc + 8);
    c40 = _mm256_loadu_ps(c + 4 * ldc), c41 = _mm256_loadu_ps(c + 4 * ldc + 8);
    c50 = _mm256_loadu_ps(c + 5 * ldc), c51 = _mm256_loadu_ps(c + 5 * ldc + 8);
  }
  const int64_t r = panel.rows, terms = panel.terms;
  const float *a0 = panel.a, *a1 = a0 + r, *a2 = a0 + 2 * r, *a3 = a0 + 3 * r, *a4 = a0 + 4 * r, *a5 = a0 + 5 * r;
  for (int64_t p = 0; p < kc; ++p, b += b_terms) {
    const int64_t at = p * terms;
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
    __m256 x = _mm256_broadcast_ss(a0 + at);
    c00 = _mm256_fmadd_ps(x, b0, c00), c01 = _mm256_fmadd_ps(x, b1, c01);
    x = _mm256_broadcast_ss(a1 + at);
    c10 = _mm256_fmadd_ps(x, b0, c10), c11 = _mm256_fmadd_ps(x, b1, c11);
    x = _mm256_broadcast_ss(a2 + at);
    c20 = _mm256_fmadd_ps(x, b0, c20), c21 = _mm256_fmadd_ps(x, b1, c21);
    x = _mm256_broadcast_ss(a3 + at);
    c30 = _mm256_fmadd_ps(x, b0, c30), c31 = _mm256_fmadd_ps(x, b1, c31);
    x = _mm256_broadcast_ss(a4 + at);
    c40 = _mm256_fmadd_ps(x, b0, c40), c41 = _mm256_fmadd_ps(x, b1, c41);
    x = _mm256_broadcast_ss(a5 + at);
    c50 = _mm256_fmadd_ps(x, b0, c50), c51 = _mm256_fmadd_ps(x, b1, c51);
  }
  _mm256_storeu_ps(c + 0 * ldc, c00), _mm256_storeu_ps(c + 0 * ldc + 8, c01);
  _mm256_storeu_ps(c + 1 * ldc, c10), _mm256_storeu_ps(c + 1 * ldc + 8, c11);
  _mm256_storeu_ps(c + 2 * ldc, c20), _mm256_storeu_ps(c + 2 * ldc + 8, c21);
  _mm256_storeu_ps(c + 3 * ldc, c30), _mm256_storeu_ps(c + 3 * ldc + 8, c31);
  _mm256_storeu_ps(c + 4 * ldc, c40), _mm256_storeu_ps(c + 4 * ldc + 8, c41);
  _mm256_storeu_ps(c + 5 * ldc, c50), _mm256_storeu_ps(c + 5 * ldc + 8, c51);
}

// kernel() over two panels of B side by side, b0 and b1 (each b(p, j..j+15) = b[p * b_terms ..]): C's 6 x 32
// block (row stride ldc) in twelve AVX-512 registers, each element's sum the chain kernel() adds. Compiled for
// AVX-512F alone, called only where the CPU has it (wide()).
__attribute__((target("avx512f"))) inline void wide_kernel(int64_t kc, PanelA panel, const float* b0, const float* b1,
                                                           int64_t b_terms, float* c, int64_t ldc, bool first) {
  __m512 c0[6], c1[6];  // unrolled (the pragmas): twelve registers, never memory
#pragma GCC unroll 6
  for (int i = 0; i < 6; ++i) {
    c0[i] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + i * ldc);
    c1[i] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + i * ldc + NR);
  }
  const int64_t r = panel.rows, terms = panel.terms;
  for (int64_t p = 0; p < kc; ++p, b0 += b_terms, b1 += b_terms) {
    const float* a = panel.a + p * terms;
    const __m512 x0 = _mm512_loadu_ps(b0), x1 = _mm512_loadu_ps(b1);
#pragma GCC unroll 6
    for (int i = 0; i < 6; ++i) {
      const __m512 x = _mm512_set1_ps(a[i * r]);
      c0[i] = _mm512_fmadd_ps(x, x0, c0[i]), c1[i] = _mm512_fmadd_ps(x, x1, c1[i]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < 6; ++i) _mm512_storeu_ps(c + i * ldc, c0[i]), _mm512_storeu_ps(c + i * ldc + NR, c1[i]);
}

// Whether the products run wide_kernel(): the CPU has AVX-512F (and its system saves the registers), unless
// PARALLEL_TF_PORTABLE_KERNEL=avx2 asks for the AVX2 kernel (graph/portable_kernel.py checks the value), which
// gives the same bits: the tests compare them so.
inline bool wide() {
  static const bool chosen = [] {
    const char* asked = std::getenv("PARALLEL_TF_PORTABLE_KERNEL");
    if (asked && std::string(asked) == "avx2") return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return chosen;
}

// What a source read where it lies offers (a Matrix; windows are always copied), by overloads rather than
// `if constexpr`, which is C++17: whether a panel of B of `cols` columns, or of A of `rows` rows, is read in place,
// where B's starts, and A's panel (else `packed`).
inline bool reads_in_place(const Matrix& b, int64_t cols) { return b.col_stride == 1 && cols == NR; }
template <typename Source>
bool reads_in_place(const Source&, int64_t) { return false; }
inline bool rows_in_place(const Matrix&, int64_t rows) { return rows == MR; }
template <typename Source>
bool rows_in_place(const Source&, int64_t) { return false; }
inline void in_place(const Matrix& b, int64_t pc, int64_t col, const float** pb, int64_t* b_terms) {
  *pb = b.at(pc, col), *b_terms = b.row_stride;
}
template <typename Source>
void in_place(const Source&, int64_t, int64_t, const float**, int64_t*) {}
inline PanelA panel_of(const Matrix& a, int64_t row, int64_t pc, int64_t rows, PanelA packed) {
  return rows_in_place(a, rows) ? PanelA{a.at(row, pc), a.row_stride, a.col_stride} : packed;
}
template <typename Source>
PanelA panel_of(const Source&, int64_t, int64_t, int64_t, PanelA packed) {
  return packed;
}

// The output rows [i0, i1) x columns [j0, j1) of c (row stride ldc) = a b, with k terms a sum. A matrix is read
// where it lies, but for a short panel at its edge (and B where its columns are not side by side); windows are
// copied a panel at a time, each panel of B once for every row of A it meets.
template <typename A, typename B>
void gemm_block(const A& a, const B& b, int64_t k, float* c, int64_t ldc, int64_t i0, int64_t i1, int64_t j0,
                int64_t j1) {
  if (k == 0) {
    for (int64_t i = i0; i < i1; ++i) std::fill(c + i * ldc + j0, c + i * ldc + j1, 0.0f);
    return;
  }
  // Each thread's own buffers, grown once to the largest block it has packed: a small product pays no allocation
  thread_local std::vector<float> packed_b, packed_a;
  packed_b.resize(std::max<size_t>(packed_b.size(), KC * std::min(NC, j1 - j0 + NR)));
  packed_a.resize(std::max<size_t>(packed_a.size(), KC * MC));
  alignas(64) float edge_c[MR * 2 * NR];
  const bool wide = portable::wide();
  const int64_t blocks = (k + KC - 1) / KC, step = (k + blocks - 1) / blocks;  // k in equal blocks of at most KC
  for (int64_t jc = j0; jc < j1; jc += NC) {
    const int64_t nc = std::min(NC, j1 - jc);
    for (int64_t pc = 0; pc < k; pc += step) {
      const int64_t kc = std::min(step, k - pc);
      const bool first = pc == 0;
      for (int64_t jr = 0; jr < nc; jr += NR) {
        const int64_t cols = std::min(NR, nc - jr);
        if (!reads_in_place(b, cols)) b.pack_columns(pc, kc, jc + jr, cols, packed_b.data() + jr * kc);
      }
      for (int64_t ic = i0; ic < i1; ic += MC) {
        const int64_t mc = std::min(MC, i1 - ic);
        for (int64_t ir = 0; ir < mc; ir += MR) {  // each panel of A: read in place, or copied once for this block
          const int64_t rows = std::min(MR, mc - ir);
          if (!rows_in_place(a, rows)) a.pack_rows(ic + ir, rows, pc, kc, packed_a.data() + ir * kc);
        }
        // A block of C at the edge, rows x cols of it (up to 2 NR columns, the wide kernel's, where `next` is the
        // second panel of B): summed in edge_c, whole, then copied
        auto edge = [&](PanelA panel, const float* pb, const float* next, int64_t b_terms, float* tile, int64_t rows,
                        int64_t cols) {
          const int64_t width = next ? 2 * NR : NR;
          if (!first) {  // the partial sums so far; zeros where C has no element
            std::fill(edge_c, edge_c + MR * width, 0.0f);
            for (int64_t i = 0; i < rows; ++i) std::copy(tile + i * ldc, tile + i * ldc + cols, edge_c + i * width);
          }
          if (next)
            wide_kernel(kc, panel, pb, next, b_terms, edge_c, width, first);
          else
            kernel(kc, panel, pb, b_terms, edge_c, width, first);
          for (int64_t i = 0; i < rows; ++i) std::copy(edge_c + i * width, edge_c + i * width + cols, tile + i * ldc);
        };
        for (int64_t jr = 0; jr < nc; jr += NR) {
          const int64_t cols = std::min(NR, nc - jr);
          const bool two = wide && nc - jr >= 2 * NR;  // this panel of B and the next, both whole, for wide_kernel
          const float* pb = packed_b.data() + jr * kc;
          int64_t b_terms = NR;
          const bool b_in_place = reads_in_place(b, cols);
          if (b_in_place) in_place(b, pc, jc + jr, &pb, &b_terms);
          const float* next = !two ? nullptr : b_in_place ? pb + NR : pb + NR * kc;
          for (int64_t ir = 0; ir < mc; ir += MR) {
            const int64_t rows = std::min(MR, mc - ir);
            const PanelA panel = panel_of(a, ic + ir, pc, rows, a.packed(packed_a.data() + ir * kc, kc));
            float* tile = c + (ic + ir) * ldc + jc + jr;
            if (rows == MR && two) {
              wide_kernel(kc, panel, pb, next, b_terms, tile, ldc, first);
            } else if (rows == MR && cols == NR) {
              kernel(kc, panel, pb, b_terms, tile, ldc, first);
            } else {
              edge(panel, pb, next, b_terms, tile, rows, two ? 2 * NR : cols);  // a short panel of A, or of B
            }
          }
          if (two) jr += NR;
        }
      }
    }
  }
}

}  // namespace portable
