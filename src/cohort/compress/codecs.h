// The codecs behind make_codec(), one file each.
#pragma once

#include "cohort/compress/codec.h"

namespace cohort::compress {

std::unique_ptr<Codec> make_plain_codec(size_t count);
std::unique_ptr<Codec> make_quantized_codec(const CompressionOptions& options, size_t count,
                                            int rank, size_t bucket);
std::unique_ptr<Codec> make_topk_codec(const CompressionOptions& options, size_t count,
                                       std::vector<TensorShape> shapes);
std::unique_ptr<Codec> make_powersgd_codec(const CompressionOptions& options, size_t count,
                                           std::vector<TensorShape> shapes, size_t bucket);

// Adds the residual into x (error feedback), when there is one.
void add_residual(const std::vector<float>& residual, float* x);

}  // namespace cohort::compress
