// llama.cpp's tokenizer conformance files (models/ggml-vocab-*.gguf.inp and .out).
//
// An .inp file holds the inputs, each followed by the separator line "__ggml_vocab_test__";
// an input may itself span lines or be empty. The .out file has one line per input: each
// id preceded by a space. llama.cpp's test-tokenizer-0 tokenizes the inputs with
// add_special = false and parse_special = false, which is what these files encode.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace pagoda {

// Splits an .inp file into its inputs.
std::vector<std::string> parse_vocab_test_inputs(std::string_view contents);
// One .out line for `ids`, newline included.
std::string format_vocab_test_line(const std::vector<TokenId>& ids);
// The whole .out file for `inputs` (parse_special and add_special are off for llama.cpp's
// files).
std::string run_vocab_test(const Tokenizer& tok, const std::vector<std::string>& inputs,
                           bool parse_special = false, bool add_special = false);

}  // namespace pagoda
