// tf.data's buffer shuffle, computed on indices: the order in which a shuffle buffer of
// `buffer_size` slots emits positions 0..n-1 of its input. Because only indices move,
// the whole epoch's order costs O(n) integer work up front, which is what makes batches
// addressable (resume at any step) and independent of the worker-thread count.
//
// Algorithm (same shape as tf.data's ShuffleDataset):
//   fill the buffer with the first min(buffer_size, n) inputs; then for t = 0, 1, ...:
//     j = draw_below(key, t, len(buffer)); emit buffer[j];
//     if inputs remain: buffer[j] = next input, else: buffer[j] = buffer.back(); pop_back.
// buffer_size 1 is the identity; buffer_size >= n is a uniform permutation.
#pragma once
#include <cstdint>
#include <vector>

namespace podlet::data {

std::vector<int64_t> buffer_shuffle_order(int64_t n, int64_t buffer_size, uint64_t key);

}  // namespace podlet::data
