// How a request's next tokens are chosen. Defaults follow vLLM/OpenAI: plain sampling at
// temperature 1 with every filter off.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pagoda {

struct SamplingParams {
  float temperature = 1.0f;  // <= 0 picks the most likely token (greedy)
  int top_k = 0;             // <= 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off; keeps tokens with p >= min_p * p_max
  // > 1 discourages tokens already in the prompt or output (divides positive logits,
  // multiplies negative ones), as in vLLM and the CTRL paper.
  float repetition_penalty = 1.0f;
  // OpenAI semantics: subtracted once for any generated token (presence) and once per
  // occurrence (frequency); they apply to generated tokens only.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::optional<uint64_t> seed;  // same seed, same output; unset draws a random seed
  int max_tokens = 16;
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;  // end generation when produced (kept in output)
  // End generation when the text contains one of these; the text is cut before it
  // unless include_stop_str_in_output.
  std::vector<std::string> stop;
  bool include_stop_str_in_output = false;
  // Completions of the prompt to generate; they share the prompt's KV blocks. With a
  // seed, completion i draws from seed + i.
  int n = 1;
  // Log-probabilities of each generated token and of the `logprobs` most likely ones at
  // each position (0: the chosen token's only); unset: none.
  std::optional<int> logprobs;
};

}  // namespace pagoda
