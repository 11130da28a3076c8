#include "labkit/parallel/gradient_compression.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>

#include <fmt/format.h>

#include "labkit/error.h"

namespace labkit {

// ---- the spec --------------------------------------------------------------

CompressionSpec parse_compression(std::string_view text) {
  auto refuse = [&]() -> CompressionSpec {
    throw std::invalid_argument(
        fmt::format("'{}' is not one of none, bf16, powersgd:R (R >= 1), topk:F (0 < F <= 1)", text));
  };
  if (text == "none") return {};
  if (text == "bf16") return {.kind = Compression::bf16};
  const std::size_t colon = text.find(':');
  if (colon == std::string_view::npos) return refuse();
  const std::string_view scheme = text.substr(0, colon), number = text.substr(colon + 1);
  const char* const end = number.data() + number.size();
  if (scheme == "powersgd") {
    int rank = 0;
    const auto [used, error] = std::from_chars(number.data(), end, rank);
    if (error != std::errc() || used != end || rank < 1) return refuse();
    return {.kind = Compression::powersgd, .rank = rank};
  }
  if (scheme == "topk") {
    double fraction = 0;
    const auto [used, error] = std::from_chars(number.data(), end, fraction);
    if (error != std::errc() || used != end || !(fraction > 0 && fraction <= 1)) return refuse();
    return {.kind = Compression::topk, .fraction = fraction};
  }
  return refuse();
}

std::string name_of(const CompressionSpec& spec) {
  switch (spec.kind) {
    case Compression::none: return "none";
    case Compression::bf16: return "bf16";
    case Compression::powersgd: return fmt::format("powersgd:{}", spec.rank);
    case Compression::topk: return fmt::format("topk:{:g}", spec.fraction);
  }
  return "?";
}

void check_compression(const CompressionSpec& spec, const std::vector<ParameterTensor>& tensors,
                       std::string_view model) {
  if (spec.kind != Compression::powersgd) return;
  // The matrix that allows the largest rank (R <= min(M, N)), the largest such.
  const ParameterTensor* largest = nullptr;
  auto limit = [](const ParameterTensor& t) { return std::min(t.rows, t.cols); };
  auto larger = [&](const ParameterTensor& a, const ParameterTensor& b) {
    return limit(a) > limit(b) || (limit(a) == limit(b) && a.count() > b.count());
  };
  for (const ParameterTensor& t : tensors)
    if (t.rows > 1 && t.cols > 1 && (!largest || larger(t, *largest))) largest = &t;
  if (!largest)
    throw std::invalid_argument(fmt::format("PowerSGD needs matrices, and {} has only vectors", model));
  if (spec.rank > limit(*largest))
    throw std::invalid_argument(fmt::format(
        "rank {} is larger than the matrices of {}: the largest, {}, is {} x {}, so R <= min({}, {}) = {}",
        spec.rank, model, largest->name, largest->rows, largest->cols, largest->rows, largest->cols,
        limit(*largest)));
}

// ---- what every scheme shares ------------------------------------------------

namespace {

bool has_payload(View v) { return v.data != nullptr; }

// A buffer of `count` elements in `storage`, or sizes only in a payload-free run.
template <class T>
View buffer(std::vector<T>& storage, std::size_t count, bool payload) {
  if (!payload) return meta_view(count, dtype_of<T>());
  storage.resize(count);
  return view_of(storage);
}

}  // namespace

void GradientCompressor::average(View grads) {
  if (grads.dtype != DType::f32 || grads.count != count_)
    fail(comm_.who(), "GradientCompressor::average", "grads has {} elements of {}, expected {} of f32", grads.count,
         name_of(grads.dtype), count_);
  sent_ = 0;
  reduce(grads);
}

std::vector<float> GradientCompressor::error() const { return std::vector<float>(count_, 0.0f); }

void GradientCompressor::all_reduce(ReduceOp op, View buf) {
  comm_.all_reduce(buf, op);
  sent_ += buf.bytes();
}

void GradientCompressor::all_gather(View send, View recv) {
  comm_.all_gather(send, recv);
  sent_ += send.bytes();
}

// ---- none and bf16 -------------------------------------------------------------

void NoCompression::reduce(View grads) { all_reduce(ReduceOp::avg, grads); }

// PyTorch's order (default_hooks._compress_hook, the fp16 and bf16 hooks
// alike): rounded to bf16 (to nearest), divided by P in bf16, summed in bf16
// (each partial sum rounded, as NCCL's bf16 allreduce does), and widened back
// exactly. Dividing first keeps an fp16 sum from overflowing; in bf16 it only
// sets where the roundings fall.
void Bf16Compression::reduce(View grads) {
  const bool payload = has_payload(grads);
  const View halves = buffer(halves_, count_, payload);
  float* g = static_cast<float*>(grads.data);
  const float P = float(comm_.size());
  if (payload) std::transform(g, g + count_, halves_.begin(), [P](float x) { return to_bf16(to_float(to_bf16(x)) / P); });
  all_reduce(ReduceOp::sum, halves);
  if (payload) std::transform(halves_.begin(), halves_.end(), g, [](bfloat16 h) { return to_float(h); });
}

// ---- PowerSGD --------------------------------------------------------------------

namespace {

// The products PowerSGD needs, on row-major matrices: M is rows x cols,
// P rows x r, Q cols x r. Sums in double, so the factors do not depend on
// float rounding more than they must.
void multiply(const float* M, const float* Q, float* P, int rows, int cols, int r) {  // P = M Q
  for (int i = 0; i < rows; ++i)
    for (int k = 0; k < r; ++k) {
      double sum = 0;
      for (int j = 0; j < cols; ++j) sum += double(M[std::size_t(i) * cols + j]) * Q[std::size_t(j) * r + k];
      P[std::size_t(i) * r + k] = float(sum);
    }
}

void multiply_transposed(const float* M, const float* P, float* Q, int rows, int cols, int r) {  // Q = M^T P
  for (int j = 0; j < cols; ++j)
    for (int k = 0; k < r; ++k) {
      double sum = 0;
      for (int i = 0; i < rows; ++i) sum += double(M[std::size_t(i) * cols + j]) * P[std::size_t(i) * r + k];
      Q[std::size_t(j) * r + k] = float(sum);
    }
}

float outer_element(const float* P, const float* Q, int i, int j, int r) {  // (P Q^T)[i][j]
  double sum = 0;
  for (int k = 0; k < r; ++k) sum += double(P[std::size_t(i) * r + k]) * Q[std::size_t(j) * r + k];
  return float(sum);
}

// Gram-Schmidt on P's r columns (modified: each column is taken out of the ones
// after it as soon as it is normalized), as PyTorch's _orthogonalize does. A
// column with nothing left (a gradient of lower rank than r) stays zero: it
// adds nothing to P P^T, where dividing by its zero norm would poison it.
void orthonormalize_columns(float* P, int rows, int r) {
  for (int k = 0; k < r; ++k) {
    double norm = 0;
    for (int i = 0; i < rows; ++i) norm += double(P[std::size_t(i) * r + k]) * P[std::size_t(i) * r + k];
    norm = std::sqrt(norm);
    if (norm == 0) continue;
    for (int i = 0; i < rows; ++i) P[std::size_t(i) * r + k] = float(P[std::size_t(i) * r + k] / norm);
    for (int later = k + 1; later < r; ++later) {
      double dot = 0;
      for (int i = 0; i < rows; ++i) dot += double(P[std::size_t(i) * r + k]) * P[std::size_t(i) * r + later];
      for (int i = 0; i < rows; ++i) P[std::size_t(i) * r + later] -= float(dot * P[std::size_t(i) * r + k]);
    }
  }
}

}  // namespace

PowerSgd::PowerSgd(Comm& comm, const std::vector<ParameterTensor>& tensors, int rank, std::uint64_t seed,
                   double min_compression_rate)
    : GradientCompressor(comm, tensors.empty() ? 0 : tensors.back().offset + tensors.back().count()) {
  std::size_t p_count = 0, q_count = 0;
  for (const ParameterTensor& t : tensors) {
    const int r = std::min({rank, t.rows, t.cols});
    const bool saves = double(r) * (t.rows + t.cols) * min_compression_rate < double(t.count());
    if (t.rows > 1 && t.cols > 1 && saves) {
      matrices_.push_back({t, r, p_count, q_count, {}});
      p_count += std::size_t(t.rows) * r;
      q_count += std::size_t(t.cols) * r;
    } else {
      whole_.push_back(t);
      whole_count_ += t.count();
    }
  }
  p_.resize(p_count);
  // Q's first value: the same N(0, 1) draws on every rank (the same seed), so
  // that the P's the ranks average are products with the same Q.
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal;
  q_.resize(q_count);
  for (float& x : q_) x = normal(gen);
}

std::uint64_t PowerSgd::formula_bytes() const {
  std::uint64_t values = whole_count_;
  for (const Matrix& m : matrices_) values += std::uint64_t(m.rank) * (m.tensor.rows + m.tensor.cols);
  return values * sizeof(float);
}

std::vector<ParameterTensor> PowerSgd::compressed() const {
  std::vector<ParameterTensor> out;
  for (const Matrix& m : matrices_) out.push_back(m.tensor);
  return out;
}

std::vector<float> PowerSgd::error() const {
  std::vector<float> out(count_, 0.0f);
  for (const Matrix& m : matrices_) std::copy(m.error.begin(), m.error.end(), out.begin() + m.tensor.offset);
  return out;
}

// Algorithm 1 in three rounds: the whole tensors, P, Q.
void PowerSgd::reduce(View grads) {
  const bool payload = has_payload(grads);
  float* g = static_cast<float*>(grads.data);
  average_whole(g, payload);
  if (matrices_.empty()) return;  // no matrix is worth its factors at this rank: the whole tensors were all
  if (payload)
    for (Matrix& m : matrices_) add_error_and_multiply(g + m.tensor.offset, m);
  all_reduce(ReduceOp::avg, buffer(p_, p_.size(), payload));
  if (payload)
    for (Matrix& m : matrices_) orthonormalize_and_keep_error(g + m.tensor.offset, m);
  all_reduce(ReduceOp::avg, buffer(q_, q_.size(), payload));
  // mean(Q) stays in q_: the next step's power iteration starts from it (warm start).
  if (payload)
    for (const Matrix& m : matrices_) write_update(g + m.tensor.offset, m);
}

// The vectors and small matrices, packed into one buffer and allreduced whole.
void PowerSgd::average_whole(float* g, bool payload) {
  const View whole = buffer(whole_values_, whole_count_, payload);
  std::size_t at = 0;
  for (const ParameterTensor& t : whole_) {
    if (payload) std::copy_n(g + t.offset, t.count(), &whole_values_[at]);
    at += t.count();
  }
  all_reduce(ReduceOp::avg, whole);
  at = 0;
  for (const ParameterTensor& t : whole_) {
    if (payload) std::copy_n(&whole_values_[at], t.count(), g + t.offset);
    at += t.count();
  }
}

// M = G + E (error feedback), in place; P = M Q.
void PowerSgd::add_error_and_multiply(float* M, Matrix& m) {
  m.error.resize(m.tensor.count());
  for (std::size_t i = 0; i < m.error.size(); ++i) M[i] += m.error[i];
  multiply(M, &q_[m.q_offset], &p_[m.p_offset], m.tensor.rows, m.tensor.cols, m.rank);
}

// P^ = orthonormal mean(P); Q = M^T P^; and this rank keeps E = M - P^ Q^T,
// what its own factors do not carry (Vogels et al.'s local error, as their
// code keeps it; PyTorch's hook keeps M minus the averaged update instead).
// So each rank's E plus its P^ Q^T is its M, and the ranks' mean E plus the
// update is their mean M: nothing is lost.
void PowerSgd::orthonormalize_and_keep_error(const float* M, Matrix& m) {
  float* P = &p_[m.p_offset];
  float* Q = &q_[m.q_offset];
  const int rows = m.tensor.rows, cols = m.tensor.cols;
  orthonormalize_columns(P, rows, m.rank);
  multiply_transposed(M, P, Q, rows, cols, m.rank);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j)
      m.error[std::size_t(i) * cols + j] = M[std::size_t(i) * cols + j] - outer_element(P, Q, i, j, m.rank);
}

// The update: P^ mean(Q)^T = P^ P^T mean(M).
void PowerSgd::write_update(float* M, const Matrix& m) const {
  for (int i = 0; i < m.tensor.rows; ++i)
    for (int j = 0; j < m.tensor.cols; ++j)
      M[std::size_t(i) * m.tensor.cols + j] = outer_element(&p_[m.p_offset], &q_[m.q_offset], i, j, m.rank);
}

// ---- top-k ---------------------------------------------------------------------

TopK::TopK(Comm& comm, std::size_t count, double fraction)
    : GradientCompressor(comm, count), k_(std::max<std::size_t>(1, std::size_t(fraction * double(count)))) {
  if (count > std::size_t(std::numeric_limits<std::int32_t>::max()))
    fail(comm.who(), "TopK", "{} gradient elements do not fit its 4-byte indices (at most 2^31 - 1)", count);
  k_ = std::min(k_, count);
}

std::vector<float> TopK::error() const { return error_.empty() ? GradientCompressor::error() : error_; }

void TopK::select_largest() {
  std::vector<std::int32_t> order(count_);
  std::iota(order.begin(), order.end(), 0);
  // Largest magnitude first; ties to the lower index, so every run picks the same.
  auto larger = [&](std::int32_t a, std::int32_t b) {
    const float x = std::abs(error_[a]), y = std::abs(error_[b]);
    return x > y || (x == y && a < b);
  };
  std::nth_element(order.begin(), order.begin() + std::ptrdiff_t(k_) - 1, order.end(), larger);
  indices_.assign(order.begin(), order.begin() + std::ptrdiff_t(k_));
  std::sort(indices_.begin(), indices_.end());
  values_.resize(k_);
  for (std::size_t i = 0; i < k_; ++i) {
    values_[i] = error_[indices_[i]];
    error_[indices_[i]] = 0;  // sent: no longer owed
  }
}

void TopK::reduce(View grads) {
  const bool payload = has_payload(grads);
  float* g = static_cast<float*>(grads.data);
  const int P = comm_.size();
  if (payload) {
    error_.resize(count_);
    for (std::size_t i = 0; i < count_; ++i) error_[i] += g[i];  // M = G + E
    select_largest();
  }
  all_gather(buffer(indices_, k_, payload), buffer(all_indices_, k_ * P, payload));
  all_gather(buffer(values_, k_, payload), buffer(all_values_, k_ * P, payload));
  if (!payload) return;
  // Rank by rank, in rank order, so that every rank adds the same floats in the same order.
  std::fill_n(g, count_, 0.0f);
  for (std::size_t i = 0; i < all_indices_.size(); ++i) g[all_indices_[i]] += all_values_[i];
  divide_local(DType::f32, g, count_, P);
}

// ---- choosing one ----------------------------------------------------------------

std::unique_ptr<GradientCompressor> make_compressor(Comm& comm, const CompressionSpec& spec,
                                                    const std::vector<ParameterTensor>& tensors,
                                                    std::uint64_t seed) {
  const std::size_t count = tensors.empty() ? 0 : tensors.back().offset + tensors.back().count();
  switch (spec.kind) {
    case Compression::none: return std::make_unique<NoCompression>(comm, count);
    case Compression::bf16: return std::make_unique<Bf16Compression>(comm, count);
    case Compression::powersgd: return std::make_unique<PowerSgd>(comm, tensors, spec.rank, seed);
    case Compression::topk: return std::make_unique<TopK>(comm, count, spec.fraction);
  }
  return nullptr;
}

}  // namespace labkit
