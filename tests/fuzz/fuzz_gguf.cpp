// libFuzzer target: arbitrary bytes as a GGUF file, then, when they parse, as a model and
// a vocabulary. Any crash, sanitizer report or runaway allocation is a bug; errors are
// the expected outcome for almost every input.
#include <cstddef>
#include <cstdint>

#include "model/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = pagoda::GgufFile::parse(data, size);
  if (!file.is_ok()) return 0;
  const pagoda::GgufFile& f = **file;
  for (const auto& kv : f.metadata()) (void)kv.second.to_string();
  for (const auto& t : f.tensors()) (void)f.tensor_data(t);
  auto tok = pagoda::Tokenizer::from_gguf(f);
  if (tok.is_ok()) {
    const auto ids = (*tok)->encode("Hello world! 123 <s> \xe2\x96\x81 \xf0\x9f\x98\x80", true, true);
    (void)(*tok)->decode(ids);
  }
  auto model = pagoda::Model::load(f);
  (void)model;
  return 0;
}
