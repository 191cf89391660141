// Tables for fused elementwise programs (prims/fused.cc): a value computed from one bf16
// value and scalars alone is read from a table of its 65536 results instead of being
// computed (the bf16 GELU and its VJP's tanh), with the same bits.
#pragma once
#include <cstdint>

namespace podlet::fused_tables {

// Whether programs may use tables (default; PODLET_FUSED_TABLES=0 turns them off).
bool enabled();
void set_enabled(bool on);
// built: tables built since start (each is cached by its instructions and scalars);
// used: values read from a table, counted per program run; runs: program runs with at
// least one table; paired: of the values used, those read two by one gather (a pair
// table: two values of the same bf16 value side by side).
struct Stats { int64_t built = 0, used = 0, runs = 0, paired = 0; };
Stats stats();

}  // namespace podlet::fused_tables
