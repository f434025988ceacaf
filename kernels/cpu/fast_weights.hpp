// kernels/cpu/fast_weights.hpp
// Weights laid out ahead for the fast kernels at load (fast_linear.hpp): BF16 weights packed into
// the GEMM's panels, FP8 weights the checkpoint copy could not repack in place (rows not a
// multiple of 64) copied into padded FP8 panels. Plain declarations (no SIMD), for callers
// outside the kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "kernels/model/weights.hpp"

namespace moe::fast {

/// `bytes` of uninitialised memory, 2 MiB-aligned and advised for transparent huge pages (a
/// decode step streams whole weights, and 4 KiB pages would cost a TLB miss every 4 KiB); under
/// 2 MiB, only 64-byte aligned.
[[nodiscard]] std::shared_ptr<void> huge_page_buffer(size_t bytes);

/// Bytes of the BF16 weight `w` packed into GEMM panels (whole panels).
[[nodiscard]] int64_t gemm_panels_bytes(const linear_weight& w) noexcept;
/// The whole BF16 weight `w` packed into GEMM panels at `dst` (gemm_panels_bytes, 64-byte
/// aligned; panel p at p * panel_size(w.in_features)), for linear_weight::gemm_panels. Throws
/// std::invalid_argument unless `w` is BF16.
void pack_gemm_panels_into(const linear_weight& w, uint16_t* dst);
/// The same in a buffer of its own.
[[nodiscard]] std::shared_ptr<const uint16_t> pack_gemm_panels(const linear_weight& w);

/// A row-major FP8 weight whose in_features is a multiple of 64 copied into
/// weight_layout::fp8_panels at `dst` (fp8_panels_bytes), the last panel padded with zero rows.
/// Throws std::invalid_argument for another weight.
void pad_fp8_panels_into(const linear_weight& w, uint8_t* dst);
/// The same in a buffer of its own.
[[nodiscard]] std::shared_ptr<const uint8_t> pad_fp8_panels(const linear_weight& w);

/// Lays out every weight the fast path multiplies for it, once, in parallel, in one huge-page
/// buffer owned by `w` (model_weights::fast_copies):
///   - BF16 weights (V3's FP8 checkpoints: the lm_head and the routers; BF16 checkpoints: all)
///     packed into GEMM panels (linear_weight::gemm_panels). The fast path multiplies BF16 only
///     through the GEMM's tile (a row's result must not depend on how many rows its call has),
///     which would otherwise pack per call. The row-major copy stays for the reference path and
///     the attention's absorbed kv_b, so this costs the BF16 weights' bytes again.
///   - row-major FP8 weights with in_features a multiple of 64 but rows not (the small preset's
///     kv_a_proj_with_mqa, 160 rows) switched to padded FP8 panels, so that few rows take the
///     panel GEMV instead of the GEMM's per-call pack.
/// Idempotent; a no-op on a CPU without the fast path (cpu_fast_path_supported), where the
/// reference backend runs and its code must not.
void prepare_fast_weights(model_weights& w);

/// The layout step of prepare_fast_weights for the weights in `todo` (each BF16, or row-major FP8
/// with in_features a multiple of 64), in parallel, in one buffer that the result owns: BF16
/// weights get gemm_panels, FP8 ones point at their panel copies.
[[nodiscard]] std::shared_ptr<void> lay_out(std::span<linear_weight* const> todo);

}  // namespace moe::fast
