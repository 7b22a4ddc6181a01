// lastmile — how the kernels run on this CPU, never what they compute: choices measured on each
// kind of machine the project has run on (the performance log), decided once a process from the
// CPU's vendor and family.
#pragma once

namespace lastmile::cpu {

// How a pass divides by a temperature; every way gives IEEE division's bits
// (cpu/quotient-inl.hpp). fastest: the way vector_divide_pays picks on this CPU and target (the
// divide on AVX-512 where it pays, else the reciprocal); by_reciprocal still divides where the
// target has no FMA or t lies outside [2^-24, 2^24]; by_instruction always divides. The last two
// let tests reach both ways on any machine.
enum class Division { fastest, by_reciprocal, by_instruction };

// The streaming reads (ReadAhead, LineByLine, argmax's lines ahead) request lines ahead of them
// only where that was measured to pay, or was never measured not to. On the Xeon of 2026-12-06
// the block max passes fell behind a plain read from memory without their requests (256 rows of
// 128k, top-k/top-p, 1.35x -> 1.18x the roofline with them), and on a Zen 5 argmax's four pairs
// gained (29.1 -> 25.3 us a row from memory). On a Zen 4 (AMD family 19h) every one of them cost
// time, its hardware prefetcher already streaming the rows: one thread, 64 rows of 256000 fp32 from
// memory, top-k/top-p 1.41-1.48x the roofline with against 1.09-1.16x without, greedy 1.20-1.25x
// against 0.97-1.04x, temperature 71-78 against 66-68 us a row. So none there; family 19h also
// holds Zen 3, which was not measured. Never changes a result, only when lines are asked for.
bool software_prefetch_pays();

// Whether the AVX-512 passes that divide a row by its temperature take the vector divide rather
// than Quotient's reciprocal corrected by FMAs (cpu/quotient-inl.hpp; both give IEEE division's
// bits). The reciprocal was built on the Xeon of 2026-12-02, where a cached 128k row's statistics
// at t = 0.8 took 54.8-56.5 us with vdivps and 44.6-45.1 without. On a Zen 4 (AMD family 19h) the
// divide runs beside the FMAs that the reciprocal would take from the exp: the same statistics
// 34.1-35.1 us with the reciprocal, 22.0-25.1 with vdivps. Only AVX-512 is measured: Zen 3 (also
// family 19h) has none, and Zen 5 (family 1Ah) was not measured.
bool vector_divide_pays();

}  // namespace lastmile::cpu
