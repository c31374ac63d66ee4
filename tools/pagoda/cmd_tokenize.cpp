// `pagoda tokenize`: text to token ids with a model's own tokenizer, and llama.cpp's
// tokenizer conformance format (--vocab-test) for checking against its reference files.
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "args.h"
#include "common.h"
#include "core/status.h"
#include "json_out.h"
#include "model/gguf.h"
#include "tokenizer/hf_vocab.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab_test_format.h"

namespace {

constexpr const char* kUsage =
    "usage: pagoda tokenize -m MODEL (-p TEXT | -f FILE | --stdin | --vocab-test CASES.inp)\n"
    "                       [--pieces] [--no-bos] [--parse-special] [--info] [--dump-pieces]\n"
    "  -m, --model PATH      GGUF file with tokenizer.ggml.* metadata (vocabulary-only is fine),\n"
    "                        or a Hugging Face folder with tokenizer.json\n"
    "  -p, --prompt TEXT     text to tokenize\n"
    "  -f, --file FILE       tokenize the contents of FILE\n"
    "      --stdin           tokenize standard input\n"
    "      --decode IDS      print the text of token ids (\"1 2 3\"), control tokens included\n"
    "      --pieces          also print each token's piece, one per line\n"
    "      --json            print {\"ids\": [...]}\n"
    "      --no-bos          do not add BOS/EOS even if the vocabulary asks for them\n"
    "      --parse-special   text like <|im_end|> becomes that control token\n"
    "      --vocab-test FILE print one line per case of a llama.cpp .inp conformance file\n"
    "                        (add_special and parse_special off, as test-tokenizer-0 does;\n"
    "                        --parse-special turns parse_special on, --add-special add_special)\n"
    "      --info            print the vocabulary's special tokens and flags\n"
    "      --dump-pieces     print every token's piece in hex, plain and with specials rendered\n";

struct Options {
  std::string model;
  std::optional<std::string> prompt, file, vocab_test, decode;
  bool from_stdin = false, pieces = false, no_bos = false, parse_special = false, info = false,
       dump_pieces = false, json = false, add_special = false;
};

int fail(const std::string& message) {
  std::fprintf(stderr, "pagoda tokenize: %s\n", message.c_str());
  return 1;
}

int usage_error(const std::string& message) {
  std::fprintf(stderr, "pagoda tokenize: %s\n%s", message.c_str(), kUsage);
  return 2;
}

// Pieces are arbitrary bytes (possibly half a UTF-8 character): show control bytes and
// bytes >= 0x80 that do not form valid UTF-8 as escapes, keep the rest readable.
std::string printable(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\\')
      out += "\\\\";
    else if (c == '\'')
      out += "\\'";
    else if (c < 0x20 || c == 0x7F)
      out += pagoda::str_format("\\x%02x", c);
    else
      out.push_back(static_cast<char>(c));
  }
  return out;
}

void print_info(const pagoda::Tokenizer& tok) {
  std::printf("n_vocab %d\nbos %d\neos %d\nadd_bos %s\neog", tok.n_vocab(), tok.bos(), tok.eos(),
              tok.add_bos() ? "true" : "false");
  for (pagoda::TokenId id = 0; id < tok.n_vocab(); ++id)
    if (tok.is_end_of_generation(id)) std::printf(" %d", id);
  std::printf("\ncontrol");
  for (pagoda::TokenId id = 0; id < tok.n_vocab(); ++id)
    if (tok.is_control(id)) std::printf(" %d", id);
  std::printf("\n");
}

std::string hex(std::string_view s) {
  std::string out;
  for (unsigned char c : s) out += pagoda::str_format("%02x", c);
  return out.empty() ? "-" : out;
}

// One line per token: id, piece, piece with special tokens rendered (hex; "-" if empty).
void dump_pieces(const pagoda::Tokenizer& tok) {
  for (pagoda::TokenId id = 0; id < tok.n_vocab(); ++id)
    std::printf("%d %s %s\n", id, hex(tok.token_to_piece(id, false)).c_str(),
                hex(tok.token_to_piece(id, true)).c_str());
}

// A GGUF file, or a Hugging Face folder (one holding tokenizer.json).
pagoda::Result<std::unique_ptr<pagoda::Tokenizer>> open_tokenizer(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    if (!pagoda::is_hf_tokenizer_folder(path))
      return pagoda::not_found("the folder has no tokenizer.json");
    return pagoda::Tokenizer::from_hf_folder(path);
  }
  auto file = pagoda::GgufFile::open(path);
  if (!file.is_ok()) return file.status();
  return pagoda::Tokenizer::from_gguf(**file);
}

}  // namespace

namespace pagoda::cli {

int cmd_tokenize(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    std::string v;
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "-m" || a == "--model") {
      if (!value(&o.model)) return usage_error(a + " needs a file");
    } else if (a == "-p" || a == "--prompt") {
      if (!value(&v)) return usage_error(a + " needs text");
      o.prompt = v;
    } else if (a == "-f" || a == "--file") {
      if (!value(&v)) return usage_error(a + " needs a file");
      o.file = v;
    } else if (a == "--decode") {
      if (!value(&v)) return usage_error(a + " needs token ids");
      o.decode = v;
    } else if (a == "--vocab-test") {
      if (!value(&v)) return usage_error(a + " needs a file");
      o.vocab_test = v;
    } else if (a == "--stdin") {
      o.from_stdin = true;
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "--pieces") {
      o.pieces = true;
    } else if (a == "--no-bos") {
      o.no_bos = true;
    } else if (a == "--add-special") {
      o.add_special = true;
    } else if (a == "--parse-special") {
      o.parse_special = true;
    } else if (a == "--info") {
      o.info = true;
    } else if (a == "--dump-pieces") {
      o.dump_pieces = true;
    } else {
      return usage_error("unknown argument '" + a + "'");
    }
  }
  if (o.model.empty()) return usage_error("no model given (-m FILE.gguf)");
  const int inputs = (o.decode ? 1 : 0) + (o.prompt ? 1 : 0) + (o.file ? 1 : 0) +
                     (o.from_stdin ? 1 : 0) + (o.vocab_test ? 1 : 0);
  if (inputs > 1) return usage_error("give only one of -p, -f, --stdin, --vocab-test, --decode");
  if (inputs == 0 && !o.info)
    return usage_error("nothing to tokenize (-p, -f, --stdin or --vocab-test)");

  auto tok = open_tokenizer(o.model);
  if (!tok.is_ok()) return ::fail(o.model + ": " + tok.status().message());
  const pagoda::Tokenizer& t = **tok;

  if (o.info) print_info(t);
  if (o.dump_pieces) dump_pieces(t);
  if (o.vocab_test) {
    auto contents = read_file(*o.vocab_test);
    if (!contents.is_ok()) return ::fail(contents.status().message());
    const std::string out = pagoda::run_vocab_test(t, pagoda::parse_vocab_test_inputs(*contents),
                                                   o.parse_special, o.add_special);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }
  if (inputs == 0) return 0;
  if (o.decode) {
    // Ids back to text (the exact bytes, control tokens rendered).
    auto ids = parse_token_list(*o.decode);
    if (!ids.is_ok()) return ::fail(ids.status().message());
    for (pagoda::TokenId id : *ids)
      if (id >= t.n_vocab())
        return ::fail(
            str_format("token id %d is out-of-range (vocabulary of %d)", id, t.n_vocab()));
    const std::string text = t.decode(*ids, true);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }

  std::string text;
  if (o.prompt) {
    text = *o.prompt;
  } else if (o.file) {
    auto contents = read_file(*o.file);
    if (!contents.is_ok()) return ::fail(contents.status().message());
    text = *contents;
  } else {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  const auto ids = t.encode(text, !o.no_bos, o.parse_special);
  if (o.json) {
    std::printf("{\"ids\":%s}\n", json_array(ids).c_str());
    return 0;
  }
  std::string line;
  for (size_t k = 0; k < ids.size(); ++k) line += (k ? " " : "") + std::to_string(ids[k]);
  std::printf("%s\n", line.c_str());
  if (o.pieces)
    for (pagoda::TokenId id : ids)
      std::printf("%6d '%s'\n", id, printable(t.token_to_piece(id, true)).c_str());
  return 0;
}

}  // namespace pagoda::cli
