// The windows of NHWC images as the operands of gemm.h's products (a convolution's, as A or as B, and its kernel
// gradient's, transposed): each a source that packs the panels the kernel reads, copied from the images where the
// kernel asks for them, never written out whole.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "gemm.h"

namespace portable {

// std::clamp, which is C++17: TensorFlow 1.15's headers build as C++14 (absl's string_view would otherwise be
// std::string_view, a symbol the library does not have).
inline int64_t clamp(int64_t v, int64_t low, int64_t high) { return v < low ? low : high < v ? high : v; }

// The windows of NHWC images as a matrix: row (image, y, x) is the size x size window around that position, from
// `before` rows and columns above and left of it, zero outside the image, in the kernel's order (row, column,
// channel); one row for each position of each image.
struct Windows {
  const float* images;
  int64_t height, width, channels, size, before;

  int64_t terms() const { return size * size * channels; }

  // A position's column, row and image, and the next position's: stepped, not divided again for each.
  struct Position {
    int64_t x, y, image;
  };
  Position position(int64_t p) const { return {p % width, (p / width) % height, p / (width * height)}; }
  void next(Position* at) const {
    if (++at->x < width) return;
    at->x = 0;
    if (++at->y == height) at->y = 0, ++at->image;
  }

  // Terms [t0, t0 + count) of the window at `at` into out[0..count): a window's row of the image at a time, its
  // part inside the image copied, the rest zeros.
  void copy(Position at, int64_t t0, int64_t count, float* out) const {
    const int64_t run = size * channels, x0 = at.x - before;  // a window's row: side by side in the image
    const int64_t left = -x0 * channels, right = (width - x0) * channels;  // its part inside the image
    int64_t dy = t0 / run, first = t0 % run;
    for (int64_t left_to_copy = count; left_to_copy > 0; ++dy, first = 0) {
      const int64_t end = std::min(first + left_to_copy, run), iy = at.y + dy - before;
      int64_t inside = clamp(left, first, end), past = clamp(right, first, end);
      if (iy < 0 || iy >= height) inside = past = end;
      const float* source = images + ((at.image * height + iy) * width + x0) * channels;
      out = std::fill_n(out, inside - first, 0.0f);
      out = std::copy(source + inside, source + past, out);
      out = std::fill_n(out, end - past, 0.0f);
      left_to_copy -= end - first;
    }
  }
  // As A: rows (positions) [i0, i0 + rows), terms [p0, p0 + kc) into panel[i * kc + p], zeros past the rows: a
  // window's terms side by side, as they lie in the image (copied whole, where an interleaved panel took a store
  // per term: the CNN's conv2 input gradient, 32 columns, spent about as long packing as multiplying).
  void pack_rows(int64_t i0, int64_t rows, int64_t p0, int64_t kc, float* panel) const {
    if (rows < MR) std::fill(panel, panel + kc * MR, 0.0f);
    Position at = position(i0);
    for (int64_t i = 0; i < rows; ++i, next(&at)) copy(at, p0, kc, panel + i * kc);
  }
  PanelA packed(const float* panel, int64_t kc) const { return {panel, kc, 1}; }
  // Whether a panel of NR terms always lies within one pixel's channels, side by side (pack_columns copies it whole).
  bool whole_panels() const { return channels % NR == 0; }
  // As B (whole_panels()): positions [p0, p0 + kc), terms [j0, j0 + NR) into panel[p * NR + j]: each position's
  // NR channels of one pixel copied at once, or zeros where that pixel is outside the image.
  void pack_columns(int64_t p0, int64_t kc, int64_t j0, int64_t, float* panel) const {
    const int64_t dy = j0 / (size * channels) - before, dx = j0 / channels % size - before, channel = j0 % channels;
    Position at = position(p0);
    for (int64_t p = 0; p < kc; ++p, panel += NR, next(&at)) {
      const int64_t iy = at.y + dy, ix = at.x + dx;
      if (iy < 0 || iy >= height || ix < 0 || ix >= width)
        std::fill(panel, panel + NR, 0.0f);
      else
        std::memcpy(panel, images + ((at.image * height + iy) * width + ix) * channels + channel, NR * sizeof(float));
    }
  }
};

// `length` floats from `source`, `step` floats on a position, to `out`, MR on, for `count` positions: a copy of a
// fixed size a position (two or three moves), not a call of memcpy.
template <int length>
void copy_runs(const float* source, int64_t step, int64_t count, float* out) {
  for (int64_t p = 0; p < count; ++p, source += step, out += MR) std::memcpy(out, source, length * sizeof(float));
}
inline void copy_runs(int64_t length, const float* source, int64_t step, int64_t count, float* out) {
  using Copy = void (*)(const float*, int64_t, int64_t, float*);
  static const Copy by_length[MR + 1] = {nullptr,       copy_runs<1>, copy_runs<2>, copy_runs<3>,
                                         copy_runs<4>, copy_runs<5>, copy_runs<6>};
  by_length[length](source, step, count, out);
}

// The windows transposed, as A: row t is term t of every position's window, the positions its terms (a
// convolution's kernel gradient: windowsᵀ @ the gradient at each position), where the channels do not come in
// whole panels (Windows::whole_panels(); else the op multiplies by the windows as B, the product transposed).
struct WindowsTransposed {
  Windows windows;

  // Rows [i0, i0 + rows) (terms) x positions [p0, p0 + kc) into panel[p * MR + i], zeros past the rows. The terms
  // are cut into runs that lie in one row of the window, side by side in the image, and the positions into rows of
  // the image: along an image row, a run's pixels are inside the image for a range of positions, each copied whole
  // (channels floats apart in the image); the positions at the image's edge are written term by term.
  void pack_rows(int64_t i0, int64_t rows, int64_t p0, int64_t kc, float* panel) const {
    if (rows < MR) std::fill(panel, panel + kc * MR, 0.0f);
    const Windows& w = windows;
    const int64_t run = w.size * w.channels;
    Windows::Position at = w.position(p0);
    for (int64_t p = 0; p < kc;) {  // the positions of one image row: [at.x, end)
      const int64_t end = std::min(w.width, at.x + kc - p), count = end - at.x;
      for (int64_t i = 0; i < rows;) {
        const int64_t first = (i0 + i) % run, length = std::min(rows - i, run - first);
        // the run's image row, and its pixels' columns at position x: x + [left, right]
        const int64_t iy = at.y + (i0 + i) / run - w.before, left = first / w.channels - w.before;
        const int64_t right = (first + length - 1) / w.channels - w.before;
        float* out = panel + p * MR + i;
        const int64_t from = clamp(-left, at.x, end), to = clamp(w.width - right, from, end);  // inside: [from, to)
        if (iy < 0 || iy >= w.height) {
          for (int64_t x = at.x; x < end; ++x) std::fill_n(out + (x - at.x) * MR, length, 0.0f);
        } else {
          const float* row = w.images + (at.image * w.height + iy) * w.width * w.channels;
          auto term_by_term = [&](int64_t x0, int64_t x1) {
            for (int64_t x = x0; x < x1; ++x)
              for (int64_t j = 0; j < length; ++j) {
                const int64_t ix = x + (first + j) / w.channels - w.before, channel = (first + j) % w.channels;
                out[(x - at.x) * MR + j] = ix < 0 || ix >= w.width ? 0.0f : row[ix * w.channels + channel];
              }
          };
          term_by_term(at.x, from);
          if (to > from)
            copy_runs(length, row + (from + left) * w.channels + first % w.channels, w.channels, to - from,
                      out + (from - at.x) * MR);
          term_by_term(to, end);
        }
        i += length;
      }
      p += count;
      at.x = end - 1;
      w.next(&at);
    }
  }
  PanelA packed(const float* panel, int64_t) const { return {panel, 1, MR}; }
};

}  // namespace portable
