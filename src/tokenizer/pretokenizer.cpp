#include "tokenizer/pretokenizer.h"

#include <functional>

#include "tokenizer/unicode.h"

namespace pagoda {
namespace {

// The patterns, as llama.cpp spells them (its (?i:...) groups already expanded into
// explicit case pairs). Two of them are recognised by their exact text and run through
// the hand-written splitters below.
constexpr std::string_view kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
constexpr std::string_view kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3CaseInsensitive =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen35 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kCjk = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+";
constexpr std::string_view kDeepseekLatin =
    "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293"
    "\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c"
    "\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5"
    "\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77"
    "\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59"
    "\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc"
    "\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107"
    "\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
    "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee"
    "\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e"
    "\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f"
    "\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2"
    "\U000118a0-\U000118df\U0001e900-\U0001e943]+";
constexpr std::string_view kDeepseekPunct =
    "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+";
constexpr std::string_view kDeepseek3Main =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kPoro = " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+";
constexpr std::string_view kTekken =
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kGpt4o =
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kSeedCoder =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kBailing =
    R"('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";

struct Variant {
  std::vector<std::string_view> names;  // first is canonical
  PreTokenizerSpec spec;
};

PreTokenizerSpec make_spec(std::vector<std::string_view> patterns, bool ignore_merges = false,
                           bool add_bos = false) {
  PreTokenizerSpec s;
  for (auto p : patterns) s.patterns.emplace_back(p);
  s.ignore_merges = ignore_merges;
  s.add_bos = add_bos;
  return s;
}

// Which tokenizer.ggml.pre names share a pre-tokenizer follows llama.cpp's llama-vocab.cpp.
const std::vector<Variant>& variants() {
  static const std::vector<Variant> v = [] {
    std::vector<Variant> out;
    const auto add = [&](std::vector<std::string_view> names, PreTokenizerSpec spec) {
      spec.canonical = std::string(names.front());
      out.push_back({std::move(names), std::move(spec)});
    };
    add({"default"}, make_spec({R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}));
    add({"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
         "jina-v5-nano"},
        make_spec({kLlama3}, /*ignore_merges=*/true, /*add_bos=*/true));
    add({"dbrx", "smaug-bpe"}, make_spec({kLlama3}));
    {
      PreTokenizerSpec glm = make_spec({kLlama3});
      glm.no_bos = true;
      add({"chatglm-bpe", "glm4"}, glm);
    }
    add({"deepseek-llm"},
        make_spec({"[\r\n]", kDeepseekLatin, kDeepseekPunct, "\\s+$", kCjk, R"(\p{N}+)"}));
    add({"deepseek-coder"},
        make_spec({"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjk, R"(\p{N})"}));
    add({"deepseek-v3"},
        make_spec({R"(\p{N}{1,3})", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+", kDeepseek3Main}));
    add({"falcon"}, make_spec({R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"}));
    add({"gpt-2", "mpt", "olmo", "jais", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es",
         "jina-v2-de", "jina-v1-en", "jina-v2-code", "roberta-bpe", "a.x-4.0", "mellum",
         "modern-bert", "exaone4", "trillion", "granite-docling"},
        make_spec({kGpt2}));
    add({"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b",
         "mellum2"},
        make_spec({R"(\p{N})", kGpt2}));
    add({"qwen2", "stablelm2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "hunyuan",
         "solar-open", "grok-2"},
        make_spec({kQwen2}));
    add({"qwen35"}, make_spec({kQwen35}));
    add({"poro-chat", "bloom", "gpt3-finnish"}, make_spec({kPoro}));
    add({"viking"}, make_spec({kPoro, R"(\p{N})"}));
    add({"tekken"}, make_spec({kTekken}, /*ignore_merges=*/true, /*add_bos=*/true));
    add({"gpt-4o", "llama4", "kanana2", "talkie"}, make_spec({kGpt4o}));
    add({"chameleon"},
        make_spec({"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )",
                   R"(\p{N})", R"([\p{P}!-/:-@\[-`{-~])", kGpt2},
                  false, /*add_bos=*/true));
    add({"seed-coder"}, make_spec({kSeedCoder}));
    add({"bailingmoe", "bailingmoe2", "llada-moe"}, make_spec({kBailing}));
    return out;
  }();
  return v;
}

constexpr uint32_t kOutside = 0xFFFFFFFF;

// Receives the pieces of one chunk in order, as lengths; returning false stops the split.
using PieceSink = std::function<bool(size_t len)>;

// The pieces of one chunk [ini, end) of `cpts`, handed to a sink as they are found. Shared
// frame for the hand-written splitters: `emit(to)` closes the piece that runs up to `to`.
class ChunkSplitter {
 public:
  ChunkSplitter(const std::vector<uint32_t>& cpts, size_t ini, size_t end, const PieceSink& sink)
      : cpts_(cpts), end_(end), prev_(ini), sink_(sink) {}
  uint32_t cpt(size_t p) const { return p < end_ ? cpts_[p] : kOutside; }
  // Flags of the code point at p, 0 past the chunk (every code point has at least one flag).
  uint16_t flags(size_t p) const { return p < end_ ? unicode::flags(cpts_[p]) : 0; }
  size_t emit(size_t to) {
    const size_t len = to - prev_;
    if (len > 0 && !stopped_) stopped_ = !sink_(len);
    prev_ = to;
    return len;
  }
  size_t end() const { return end_; }
  // The sink asked for no more pieces: the splitter's loop ends.
  bool stopped() const { return stopped_; }

 private:
  const std::vector<uint32_t>& cpts_;
  size_t end_;
  size_t prev_;
  const PieceSink& sink_;
  bool stopped_ = false;
};

constexpr uint16_t kWs = unicode::kWhitespace;
constexpr uint16_t kL = unicode::kLetter;
constexpr uint16_t kN = unicode::kNumber;

uint32_t ascii_lower(uint32_t c) {
  return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

// 's|'t|'re|'ve|'m|'ll|'d (case-insensitive when asked): length of the contraction at pos, or 0.
size_t contraction(const ChunkSplitter& s, size_t pos, bool any_case) {
  if (s.cpt(pos) != '\'' || pos + 1 >= s.end()) return 0;
  const auto low = [&](size_t p) { return any_case ? ascii_lower(s.cpt(p)) : s.cpt(p); };
  const uint32_t a = low(pos + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (pos + 2 < s.end()) {
    const uint32_t b = low(pos + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  return 0;
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
bool split_gpt2(const std::vector<uint32_t>& cpts, size_t ini, size_t end, const PieceSink& sink) {
  ChunkSplitter s(cpts, ini, end, sink);
  for (size_t pos = ini; pos < end && !s.stopped();) {
    if (const size_t n = contraction(s, pos, false)) {
      pos += s.emit(pos + n);
      continue;
    }
    const uint32_t c = s.cpt(pos);
    uint16_t f2 = c == ' ' ? s.flags(pos + 1) : s.flags(pos);
    if (f2 & kL) {
      pos += c == ' ';
      while (f2 & kL) f2 = s.flags(++pos);
      s.emit(pos);
      continue;
    }
    if (f2 & kN) {
      pos += c == ' ';
      while (f2 & kN) f2 = s.flags(++pos);
      s.emit(pos);
      continue;
    }
    if (!(f2 & (kWs | kL | kN)) && f2) {
      pos += c == ' ';
      while (!(f2 & (kWs | kL | kN)) && f2) f2 = s.flags(++pos);
      s.emit(pos);
      continue;
    }
    size_t ws = 0;
    while (s.flags(pos + ws) & kWs) ++ws;
    if (ws > 1 && s.cpt(pos + ws) != kOutside) {  // \s+(?!\S): leave the last one
      pos += ws - 1;
      s.emit(pos);
      continue;
    }
    if (ws > 0) {
      pos += ws;
      s.emit(pos);
      continue;
    }
    s.emit(++pos);  // nothing matched: the character stands alone
  }
  return !s.stopped();
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
// \s*[\r\n]+|\s+(?!\S)|\s+
bool split_llama3(const std::vector<uint32_t>& cpts, size_t ini, size_t end,
                  const PieceSink& sink) {
  ChunkSplitter s(cpts, ini, end, sink);
  for (size_t pos = ini; pos < end && !s.stopped();) {
    if (const size_t n = contraction(s, pos, true)) {
      pos += s.emit(pos + n);
      continue;
    }
    const uint32_t c = s.cpt(pos);
    const uint16_t f = s.flags(pos);
    if (!(c == '\r' || c == '\n' || (f & kN)) && ((f & kL) || (s.flags(pos + 1) & kL))) {
      ++pos;
      while (s.flags(pos) & kL) ++pos;
      s.emit(pos);
      continue;
    }
    if (f & kN) {
      size_t run = pos;
      while (s.flags(pos) & kN) {
        if (++pos - run >= 3) {
          s.emit(pos);
          run = pos;
        }
      }
      s.emit(pos);
      continue;
    }
    uint16_t f2 = c == ' ' ? s.flags(pos + 1) : f;
    // llama.cpp tests the current character's flags here, not f2's; kept for identical ids.
    if (!(f2 & (kWs | kL | kN)) && f) {
      pos += c == ' ';
      while (!(f2 & (kWs | kL | kN)) && f2) f2 = s.flags(++pos);
      while (s.cpt(pos) == '\r' || s.cpt(pos) == '\n') ++pos;
      s.emit(pos);
      continue;
    }
    size_t ws = 0, last_newline_end = 0;
    while (s.flags(pos + ws) & kWs) {
      const uint32_t w = s.cpt(pos + ws);
      if (w == '\r' || w == '\n') last_newline_end = pos + ws + 1;
      ++ws;
    }
    if (last_newline_end > 0) {  // \s*[\r\n]+
      pos = last_newline_end;
      s.emit(pos);
      continue;
    }
    if (ws > 1 && s.cpt(pos + ws) != kOutside) {
      pos += ws - 1;
      s.emit(pos);
      continue;
    }
    if (ws > 0) {
      pos += ws;
      s.emit(pos);
      continue;
    }
    s.emit(++pos);
  }
  return !s.stopped();
}

// std::regex_iterator over each chunk: matches and the gaps between them become pieces.
bool split_regex(const Regex& re, const std::vector<uint32_t>& symbols, size_t ini, size_t end,
                 const PieceSink& sink) {
  size_t last = ini, from = ini;
  bool retry_not_empty = false;
  while (from <= end) {
    size_t mb = 0, me = 0;
    if (!re.search(symbols.data(), ini, end, from, retry_not_empty, &mb, &me)) {
      if (retry_not_empty) {  // no non-empty match here: search on from the next symbol
        retry_not_empty = false;
        ++from;
        continue;
      }
      break;
    }
    if (mb > last && !sink(mb - last)) return false;
    if (me > mb && !sink(me - mb)) return false;
    last = me;
    from = me;
    retry_not_empty = me == mb;
  }
  return last >= end || sink(end - last);
}

}  // namespace

const PreTokenizerSpec* find_pre_tokenizer(std::string_view name) {
  for (const Variant& v : variants())
    for (std::string_view n : v.names)
      if (n == name) return &v.spec;
  return nullptr;
}

const PreTokenizerSpec& default_pre_tokenizer() {
  return variants().front().spec;
}

std::vector<std::string_view> known_pre_tokenizer_names() {
  std::vector<std::string_view> names;
  for (const Variant& v : variants()) names.insert(names.end(), v.names.begin(), v.names.end());
  return names;
}

Result<PreTokenizer> PreTokenizer::create(const PreTokenizerSpec& spec) {
  PreTokenizer p;
  p.spec_ = spec;
  for (const std::string& pattern : spec.patterns) {
    if (pattern == kGpt2 && !spec.regex_only) {
      p.steps_.push_back({Kind::kGpt2, nullptr});
    } else if ((pattern == kLlama3 || pattern == kLlama3CaseInsensitive) && !spec.regex_only) {
      p.steps_.push_back({Kind::kLlama3, nullptr});
    } else {
      PAGODA_ASSIGN_OR_RETURN(Regex re, Regex::compile(pattern));
      p.steps_.push_back({Kind::kRegex, std::make_shared<const Regex>(std::move(re))});
    }
  }
  return p;
}

bool PreTokenizer::for_each_word(std::string_view text,
                                 const std::function<bool(std::string_view)>& fn) const {
  const std::vector<uint32_t> cpts = unicode::decode(text);
  std::vector<uint32_t> collapsed, widened;  // built on first use
  std::string word;
  // Each step splits the pieces the step before it found, so a piece goes through every step
  // as soon as it is found (a piece's split depends on nothing outside it) and the caller
  // can stop after any word without the rest of the text being split.
  std::function<bool(size_t, size_t, size_t)> run = [&](size_t k, size_t ini, size_t end) {
    if (k == steps_.size()) {
      word.clear();
      for (size_t i = ini; i < end; ++i) unicode::append_utf8(&word, cpts[i]);
      return fn(word);
    }
    const Step& step = steps_[k];
    size_t start = ini;
    const PieceSink sink = [&](size_t len) {
      const bool more = run(k + 1, start, start + len);
      start += len;
      return more;
    };
    switch (step.kind) {
      case Kind::kGpt2:
        return split_gpt2(cpts, ini, end, sink);
      case Kind::kLlama3:
        return split_llama3(cpts, ini, end, sink);
      case Kind::kRegex: {
        std::vector<uint32_t>& alt = step.regex->collapsed() ? collapsed : widened;
        if (alt.empty()) {
          alt.resize(cpts.size());
          for (size_t i = 0; i < cpts.size(); ++i)
            alt[i] = step.regex->collapsed() ? Regex::collapse(cpts[i]) : Regex::widen(cpts[i]);
        }
        return split_regex(*step.regex, alt, ini, end, sink);
      }
    }
    return true;
  };
  return cpts.empty() || run(0, 0, cpts.size());
}

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string> words;
  for_each_word(text, [&](std::string_view w) {
    words.emplace_back(w);
    return true;
  });
  return words;
}

}  // namespace pagoda
