// The portable kernels' ops (graph/portable_kernel.py), each a product of gemm.h, every output element summed over
// its terms in order by fused multiply-adds, the work split over TensorFlow's intra-op threads by whole output
// elements: their bits follow the inputs alone, on every x86-64 CPU with AVX2 and FMA, whatever its caches, cores
// or thread count, and whether it has AVX-512 (a wider kernel, the same sums).
//   PortableMatMul         op(a) @ op(b), for matrices (a dense layer and its gradients)
//   PortableWindowsMatMul  windows(images) @ b: a convolution, and the gradient reaching its inputs;
//                          with transpose_windows, windows(images)ᵀ @ b: the gradient of its kernel
//   PortableMaxPoolGrad    a non-overlapping max pool's gradient (no arithmetic: TensorFlow's, faster), and with
//                          relu the gradient on through the ReLU before the pool (ReluGrad's product by 1 or 0)
// where windows(images) is each position's size x size window of NHWC images, `before` rows and columns above and
// left of it, zero outside the image, one row per position, in the kernel's order (row, column, channel).
#include <type_traits>
#include <vector>

#include "gemm.h"
#include "windows.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/util/work_sharder.h"

namespace {

// TensorFlow's version (PARALLEL_TF_TENSORFLOW, major * 100 + minor), given by graph/portable_kernel.py as it
// compiles this: TensorFlow 2's headers do not define it. Its "OK": Status::OK() until 2.9, OkStatus() from 2.10.
inline tensorflow::Status ok() {
#if PARALLEL_TF_TENSORFLOW >= 210
  return tensorflow::OkStatus();
#else
  return tensorflow::Status::OK();
#endif
}

// An int attribute's type, as GetAttr takes it: TensorFlow 1.15's int64 is long long, int64_t is long.
#if PARALLEL_TF_TENSORFLOW < 200
using AttrInt = tensorflow::int64;
#else
using AttrInt = int64_t;
#endif

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::errors::InvalidArgument;

// out [m x n] = a b, whole output elements to each thread: by panels of rows where there are more rows than columns
// (each thread reads all of b, and its rows of a), else by panels of columns, unless that leaves a thread idle. A
// panel of columns is as wide as the kernel's block: two of NR where the wide kernel runs, so that no thread is left
// an odd one for the narrow kernel (the CNN's conv1 kernel gradient, 32 columns: one each before).
template <typename A, typename B>
void multiply(OpKernelContext* context, const A& a, const B& b, int64_t m, int64_t k, int64_t n, float* out) {
  const auto* threads = context->device()->tensorflow_cpu_worker_threads();
  const int64_t nr = portable::wide() ? 2 * portable::NR : portable::NR;
  const int64_t row_panels = (m + portable::MR - 1) / portable::MR;
  const int64_t column_panels = (n + nr - 1) / nr;
  const bool rows_suffice = row_panels >= threads->num_threads, columns_suffice = column_panels >= threads->num_threads;
  const bool by_rows = m >= n ? rows_suffice || !columns_suffice : rows_suffice && !columns_suffice;
  const int64_t cost = 2 * k * (by_rows ? portable::MR * n : nr * m);
  auto work = [&](int64_t first, int64_t last) {
    if (by_rows)
      portable::gemm_block(a, b, k, out, n, first * portable::MR, std::min(m, last * portable::MR), 0, n);
    else
      portable::gemm_block(a, b, k, out, n, 0, m, first * nr, std::min(n, last * nr));
  };
  tensorflow::Shard(threads->num_threads, threads->workers, by_rows ? row_panels : column_panels, cost, work);
}

portable::Matrix matrix(const Tensor& t, bool transpose) {
  const int64_t columns = t.dim_size(1);
  return {t.flat<float>().data(), transpose ? 1 : columns, transpose ? columns : 1};
}

class PortableMatMul : public OpKernel {
 public:
  explicit PortableMatMul(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("transpose_a", &transpose_a_));
    OP_REQUIRES_OK(context, context->GetAttr("transpose_b", &transpose_b_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& a = context->input(0);
    const Tensor& b = context->input(1);
    OP_REQUIRES(context, a.dims() == 2 && b.dims() == 2, InvalidArgument("PortableMatMul takes matrices"));
    const int64_t m = a.dim_size(transpose_a_ ? 1 : 0), k = a.dim_size(transpose_a_ ? 0 : 1);
    const int64_t n = b.dim_size(transpose_b_ ? 0 : 1), k_b = b.dim_size(transpose_b_ ? 1 : 0);
    OP_REQUIRES(context, k == k_b, InvalidArgument("PortableMatMul: inner dimensions differ: ", k, " and ", k_b));
    Tensor* c = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({m, n}), &c));
    if (m && n) multiply(context, matrix(a, transpose_a_), matrix(b, transpose_b_), m, k, n, c->flat<float>().data());
  }

 private:
  bool transpose_a_ = false, transpose_b_ = false;
};

// What the windows ops share: their attributes, and the windows of NHWC images.
class WindowsOp : public OpKernel {
 public:
  explicit WindowsOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("size", &size_));
    OP_REQUIRES_OK(context, context->GetAttr("before", &before_));
  }

 protected:
  portable::Windows windows(const Tensor& images) const {
    return {images.flat<float>().data(), images.dim_size(1), images.dim_size(2), images.dim_size(3), size_, before_};
  }
  AttrInt size_ = 1, before_ = 0;
};

class PortableWindowsMatMul : public WindowsOp {
 public:
  explicit PortableWindowsMatMul(OpKernelConstruction* context) : WindowsOp(context) {
    OP_REQUIRES_OK(context, context->GetAttr("transpose_windows", &transpose_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& images = context->input(0);
    const Tensor& b = context->input(1);
    OP_REQUIRES(context, images.dims() == 4, InvalidArgument("windows of NHWC images, not rank ", images.dims()));
    const portable::Windows w = windows(images);
    const int64_t positions = images.dim_size(0) * w.height * w.width;
    const int64_t m = transpose_ ? w.terms() : positions, k = transpose_ ? positions : w.terms();
    OP_REQUIRES(context, b.dims() == 2 && b.dim_size(0) == k,
                InvalidArgument("PortableWindowsMatMul: b must be [", k, ", n]"));
    const int64_t n = b.dim_size(1);
    Tensor* c = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({m, n}), &c));
    if (!m || !n) return;
    if (transpose_ && w.whole_panels())
      OP_REQUIRES_OK(context, transposed_product(context, w, b, m, k, n, c->flat<float>().data()));
    else if (transpose_)
      multiply(context, portable::WindowsTransposed{w}, matrix(b, false), m, k, n, c->flat<float>().data());
    else
      multiply(context, w, matrix(b, false), m, k, n, c->flat<float>().data());
  }

 private:
  // out [m x n] = windowsᵀ b, computed as its transpose, bᵀ windows, then transposed: the windows as B come a
  // pixel's channels at a time, copied whole, where as A each term is gathered from every window on its own (twice
  // the time for the CNN's conv2 kernel gradient, 288 x 30720 x 64). Each element is the same sum of the same
  // products (an FMA's product does not depend on its operands' order), so the same bits.
  static tensorflow::Status transposed_product(OpKernelContext* context, const portable::Windows& w, const Tensor& b,
                                               int64_t m, int64_t k, int64_t n, float* out) {
    Tensor product;
    TF_RETURN_IF_ERROR(context->allocate_temp(tensorflow::DT_FLOAT, TensorShape({n, m}), &product));
    float* t = product.flat<float>().data();
    multiply(context, matrix(b, true), w, n, k, m, t);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) out[j * n + i] = t[i * m + j];
    return ok();
  }

  bool transpose_ = false;
};

// A window's gradient where its largest input came out of a ReLU: ReluGrad's product by 1 or 0 (so -0 for a
// negative gradient, NaN for a NaN), as TensorFlow's ReluGrad would compute it after the pool's.
inline float through_relu(float gradient, float largest) { return gradient * (largest > 0.0f ? 1.0f : 0.0f); }

// Two input rows of 2 x 2 windows, eight channels at a time: each window's gradient to its first largest input.
template <bool relu>
inline void two_by_two(const float* in, const float* up, float* out, int64_t width, int64_t channels) {
  const int64_t below = width * channels;
  for (int64_t x = 0; x < width; x += 2)
    for (int64_t c = 0; c < channels; c += 8) {
      const int64_t at = x * channels + c, right = at + channels;
      const __m256 v[4] = {_mm256_loadu_ps(in + at), _mm256_loadu_ps(in + right), _mm256_loadu_ps(in + below + at),
                           _mm256_loadu_ps(in + below + right)};
      __m256 largest = v[0];
      __m256 which[4] = {_mm256_castsi256_ps(_mm256_set1_epi32(-1)), _mm256_setzero_ps(), _mm256_setzero_ps(),
                         _mm256_setzero_ps()};
      for (int k = 1; k < 4; ++k) {  // strictly larger takes it: the first of equals keeps it
        const __m256 larger = _mm256_cmp_ps(v[k], largest, _CMP_GT_OQ);
        for (int j = 0; j < k; ++j) which[j] = _mm256_andnot_ps(larger, which[j]);
        which[k] = larger;
        largest = _mm256_blendv_ps(largest, v[k], larger);
      }
      __m256 gradient = _mm256_loadu_ps(up + (x / 2) * channels + c);
      if (relu)
        gradient = _mm256_mul_ps(gradient, _mm256_and_ps(_mm256_cmp_ps(largest, _mm256_setzero_ps(), _CMP_GT_OQ),
                                                         _mm256_set1_ps(1.0f)));
      _mm256_storeu_ps(out + at, _mm256_and_ps(which[0], gradient));
      _mm256_storeu_ps(out + right, _mm256_and_ps(which[1], gradient));
      _mm256_storeu_ps(out + below + at, _mm256_and_ps(which[2], gradient));
      _mm256_storeu_ps(out + below + right, _mm256_and_ps(which[3], gradient));
    }
}

// The gradient of a max pool whose windows do not overlap (stride = size): each window's upstream gradient goes to
// its first largest input, scanned row by row; every other input gets 0. No two windows share an input, so nothing
// is added: TensorFlow's own MaxPoolGrad computes the same, an order of magnitude slower on its CPU kernel. With
// `relu`, the pool's inputs are a ReLU's outputs and the gradient goes on through the ReLU too (through_relu): the
// bits of ReluGrad after the pool's gradient, in one pass over the inputs instead of two.
class PortableMaxPoolGrad : public OpKernel {
 public:
  explicit PortableMaxPoolGrad(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("size", &size_));
    OP_REQUIRES_OK(context, context->GetAttr("relu", &relu_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& inputs = context->input(0);
    const Tensor& upstream = context->input(1);
    OP_REQUIRES(context, inputs.dims() == 4 && upstream.dims() == 4, InvalidArgument("NHWC inputs and gradient"));
    const int64_t batch = inputs.dim_size(0), height = inputs.dim_size(1), width = inputs.dim_size(2);
    const int64_t channels = inputs.dim_size(3), size = size_;
    const int64_t rows_out = upstream.dim_size(1), columns_out = upstream.dim_size(2);
    OP_REQUIRES(context, rows_out == (height + size - 1) / size && columns_out == (width + size - 1) / size,
                InvalidArgument("PortableMaxPoolGrad: the gradient's shape is not the SAME pool's"));
    Tensor* gradient = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, inputs.shape(), &gradient));
    const float* in = inputs.flat<float>().data();
    const float* up = upstream.flat<float>().data();
    float* out = gradient->flat<float>().data();
    auto work = [&](int64_t first, int64_t last) {  // output rows: (image, row) pairs, each its inputs' rows
      std::vector<const float*> best(channels);
      for (int64_t unit = first; unit < last; ++unit) {
        const int64_t image = unit / rows_out, oy = unit % rows_out, y_end = std::min(height, (oy + 1) * size);
        float* rows = out + (image * height + oy * size) * width * channels;
        if (size == 2 && y_end - oy * size == 2 && width % 2 == 0 && channels % 8 == 0) {
          const float* corner = in + (rows - out);
          const float* gradients = up + unit * columns_out * channels;
          if (relu_)
            two_by_two<true>(corner, gradients, rows, width, channels);
          else
            two_by_two<false>(corner, gradients, rows, width, channels);
          continue;
        }
        std::fill(rows, out + (image * height + y_end) * width * channels, 0.0f);
        for (int64_t ox = 0; ox < columns_out; ++ox) {
          const int64_t x_end = std::min(width, (ox + 1) * size);
          const float* corner = in + ((image * height + oy * size) * width + ox * size) * channels;
          for (int64_t c = 0; c < channels; ++c) best[c] = corner + c;
          for (int64_t y = oy * size; y < y_end; ++y)  // row by row, each pixel's channels side by side
            for (int64_t x = ox * size; x < x_end; ++x) {
              const float* pixel = in + ((image * height + y) * width + x) * channels;
              for (int64_t c = 0; c < channels; ++c)
                if (pixel[c] > *best[c]) best[c] = pixel + c;
            }
          const float* gradient = up + ((image * rows_out + oy) * columns_out + ox) * channels;
          for (int64_t c = 0; c < channels; ++c)
            out[best[c] - in] = relu_ ? through_relu(gradient[c], *best[c]) : gradient[c];
        }
      }
    };
    const auto* threads = context->device()->tensorflow_cpu_worker_threads();
    tensorflow::Shard(threads->num_threads, threads->workers, batch * rows_out, size * width * channels * 4, work);
  }

 private:
  AttrInt size_ = 2;
  bool relu_ = false;
};

}  // namespace

// Which kernel the products run, "avx512f" or "avx2" (gemm.h's wide()), for summary.json: read by ctypes
// (graph/portable_kernel.py), so what a run reports is what this library chose.
extern "C" __attribute__((visibility("default"))) const char* parallel_tf_portable_kernel() {
  return portable::wide() ? "avx512f" : "avx2";
}

REGISTER_OP("PortableMaxPoolGrad")
    .Input("inputs: float")
    .Input("upstream: float")
    .Output("to_inputs: float")
    .Attr("size: int >= 1")
    .Attr("relu: bool = false")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(0));
      return ok();
    });
REGISTER_KERNEL_BUILDER(Name("PortableMaxPoolGrad").Device(tensorflow::DEVICE_CPU), PortableMaxPoolGrad);

REGISTER_OP("PortableMatMul")
    .Input("a: float")
    .Input("b: float")
    .Output("product: float")
    .Attr("transpose_a: bool = false")
    .Attr("transpose_b: bool = false")
    .SetShapeFn(tensorflow::shape_inference::MatMulShape);
REGISTER_KERNEL_BUILDER(Name("PortableMatMul").Device(tensorflow::DEVICE_CPU), PortableMatMul);

REGISTER_OP("PortableWindowsMatMul")
    .Input("images: float")
    .Input("b: float")
    .Output("product: float")
    .Attr("size: int >= 1")
    .Attr("before: int >= 0")
    .Attr("transpose_windows: bool = false")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->Matrix(c->UnknownDim(), c->Dim(c->input(1), 1)));
      return ok();
    });
REGISTER_KERNEL_BUILDER(Name("PortableWindowsMatMul").Device(tensorflow::DEVICE_CPU), PortableWindowsMatMul);
