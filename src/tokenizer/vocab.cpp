#include "tokenizer/vocab.h"

#include <algorithm>
#include <cctype>
#include <cinttypes>

#include "core/log.h"
#include "core/text.h"

namespace pagoda {
namespace {

constexpr std::string_view kPrefix = "tokenizer.ggml.";

std::string key(std::string_view name) {
  return std::string(kPrefix) + std::string(name);
}

// An array-valued key; nullptr when absent, an error when present with the wrong shape.
Result<const GgufValue*> find_array(const GgufFile& f, std::string_view name, bool numeric) {
  const GgufValue* v = f.find(key(name));
  if (v == nullptr) return static_cast<const GgufValue*>(nullptr);
  if (v->type != GgufType::kArray)
    return corrupt(key(name) + " must be an array, found " + std::string(gguf_type_name(v->type)));
  const bool ok = numeric ? (v->elem_type != GgufType::kString &&
                             v->elem_type != GgufType::kArray && v->elem_type != GgufType::kBool)
                          : v->elem_type == GgufType::kString;
  if (!ok)
    return corrupt(key(name) + " must be an array of " + (numeric ? "numbers" : "strings") +
                   ", found an array of " + std::string(gguf_type_name(v->elem_type)));
  return v;
}

Result<std::optional<bool>> read_bool(const GgufFile& f, std::string_view name) {
  const GgufValue* v = f.find(key(name));
  if (v == nullptr) return std::optional<bool>();
  if (v->type != GgufType::kBool)
    return corrupt(key(name) + " must be a bool, found " + std::string(gguf_type_name(v->type)));
  return std::optional<bool>(v->i != 0);
}

// tokenizer.ggml.token_type values.
uint32_t attr_of_type(int64_t type) {
  switch (type) {
    case 1:
      return kAttrNormal;
    case 2:
      return kAttrUnknown;
    case 3:
      return kAttrControl;
    case 4:
      return kAttrUserDefined;
    case 5:
      return kAttrUnused;
    case 6:
      return kAttrByte;
    default:
      return kAttrUndefined;
  }
}

// Which tokens end generation, and which ones serve as EOT and FIM markers when the file
// does not say, is decided by their text: llama.cpp does the same, because converters do
// not record it. The lists are llama.cpp's.
const std::vector<std::string_view> kEotNames = {"<|eot_id|>",
                                                 "<|im_end|>",
                                                 "<|end|>",
                                                 "<end_of_turn>",
                                                 "<|endoftext|>",
                                                 "<|end_of_text|>",
                                                 "<EOT>",
                                                 "_<EOT>",
                                                 "[EOT]",
                                                 "<\uFF5Cend\u2581of\u2581sentence\uFF5C>",
                                                 "<end_of_utterance>"};
const std::vector<std::string_view> kEomNames = {"<|eom_id|>"};
const std::vector<std::string_view> kFimPreNames = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",    "<\uFF5Cfim\u2581begin\uFF5C>",
    "<PRE>",          "\u2581<PRE>",  "<|code_prefix|>", "<|prefix|>"};
const std::vector<std::string_view> kFimSufNames = {
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",    "<\uFF5Cfim\u2581hole\uFF5C>",
    "<SUF>",          "\u2581<SUF>",  "<|code_suffix|>", "<|suffix|>"};
const std::vector<std::string_view> kFimMidNames = {
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>",    "<\uFF5Cfim\u2581end\uFF5C>",
    "<MID>",          "\u2581<MID>",  "<|code_middle|>", "<|middle|>"};
const std::vector<std::string_view> kFimPadNames = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>",
                                                    "<PAD>", "[PAD]"};
const std::vector<std::string_view> kFimRepNames = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                                    "<REPO>", "<reponame>"};
const std::vector<std::string_view> kFimSepNames = {"<|file_sep|>"};
const std::vector<std::string_view> kEogNames = {"<|eot_id|>",
                                                 "<|im_end|>",
                                                 "<|end|>",
                                                 "<|return|>",
                                                 "<|call|>",
                                                 "<|flush|>",
                                                 "<|calls|>",
                                                 "<end_of_turn>",
                                                 "<|endoftext|>",
                                                 "</s>",
                                                 "<|eom_id|>",
                                                 "<EOT>",
                                                 "_<EOT>",
                                                 "[EOT]",
                                                 "[EOS]",
                                                 "<|end_of_text|>",
                                                 "<end_of_utterance>",
                                                 "<eos>",
                                                 "<turn|>",
                                                 "<|tool_response>",
                                                 "<\uFF5Cend\u2581of\u2581sentence\uFF5C>",
                                                 "[e~["};

// First token of `names` present in `v`, made a control token when `mark`.
void detect(Vocab& v, bool mark, TokenId* id, const std::vector<std::string_view>& names) {
  if (*id >= 0) return;
  for (std::string_view n : names) {
    if (auto t = v.find(n)) {
      *id = *t;
      if (mark) v.tokens[static_cast<size_t>(*t)].attr |= kAttrControl;
      return;
    }
  }
}

class Loader {
 public:
  Loader(const GgufFile& f, Vocab* v) : f_(f), v_(*v) {}

  Status load() {
    PAGODA_RETURN_IF_ERROR(read_model());
    PAGODA_RETURN_IF_ERROR(read_tokens());
    PAGODA_RETURN_IF_ERROR(read_special_ids());
    v_.detect_special_by_text(/*mark=*/true);
    v_.build_special_list();
    apply_model_quirks();
    return Status::ok();
  }

 private:
  Status read_model() {
    const GgufValue* mv = f_.find(key("model"));
    if (mv == nullptr)
      return not_found("no tokenizer in this file (tokenizer.ggml.model is missing)");
    if (mv->type != GgufType::kString) return corrupt(key("model") + " must be a string");
    const std::string model(mv->str);
    if (const GgufValue* pv = f_.find(key("pre"))) {
      if (pv->type != GgufType::kString) return corrupt(key("pre") + " must be a string");
      v_.pre_name = std::string(pv->str);
    }
    if (model == "no_vocab" || model == "none")
      return unsupported("the file has no vocabulary (tokenizer.ggml.model = '" + model + "')");
    if (model == "llama") {
      v_.type = VocabType::kSpm;
      v_.bos = 1;
      v_.eos = 2;
      v_.unk = 0;
      v_.add_space_prefix = true;
      v_.add_bos = true;
    } else if (model == "gpt2") {
      v_.type = VocabType::kBpe;
      // llama.cpp's defaults for byte-level BPE, kept so that files relying on them agree.
      v_.bos = 11;
      v_.eos = 11;
      const PreTokenizerSpec* spec = find_pre_tokenizer(v_.pre_name);
      if (spec == nullptr) {
        log_warn(v_.pre_name.empty()
                     ? "tokenizer: no tokenizer.ggml.pre; using the default pre-tokenizer (token "
                       "ids may differ from the model's own tokenizer)"
                     : "tokenizer: unknown pre-tokenizer '" + v_.pre_name +
                           "'; using the default one (token ids may differ from the model's own "
                           "tokenizer)");
        spec = &default_pre_tokenizer();
      }
      v_.pre = *spec;
      v_.add_bos = spec->add_bos;
      if (spec->no_bos) v_.bos = -1;
    } else {
      return unsupported("tokenizer model '" + model +
                         "' is not supported (supported: 'llama' SentencePiece, 'gpt2' byte-level "
                         "BPE)");
    }
    PAGODA_ASSIGN_OR_RETURN(auto prefix, read_bool(f_, "add_space_prefix"));
    if (prefix) v_.add_space_prefix = *prefix;
    if (v_.type == VocabType::kBpe) PAGODA_RETURN_IF_ERROR(read_merges());
    return Status::ok();
  }

  Status read_merges() {
    PAGODA_ASSIGN_OR_RETURN(const GgufValue* merges, find_array(f_, "merges", false));
    if (merges == nullptr) return corrupt("byte-level BPE vocabulary without " + key("merges"));
    v_.merge_ranks.reserve(merges->strings.size());
    std::string k;
    for (size_t i = 0; i < merges->strings.size(); ++i) {
      const std::string_view m = merges->strings[i];
      const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string_view::npos;
      k.clear();
      if (sp != std::string_view::npos) {
        k.append(m.substr(0, sp));
        k.push_back('\n');
        k.append(m.substr(sp + 1));
      } else {
        k.push_back('\n');  // llama.cpp keeps a malformed merge as an empty pair
      }
      v_.merge_ranks.emplace(k, static_cast<int32_t>(i));
    }
    return Status::ok();
  }

  Status read_tokens() {
    PAGODA_ASSIGN_OR_RETURN(const GgufValue* toks, find_array(f_, "tokens", false));
    if (toks == nullptr) return corrupt("vocabulary without " + key("tokens"));
    const size_t n = toks->strings.size();
    if (n == 0) return corrupt(key("tokens") + " is empty");
    if (n > static_cast<size_t>(INT32_MAX)) return corrupt(key("tokens") + " is too long");
    PAGODA_ASSIGN_OR_RETURN(const GgufValue* scores, find_array(f_, "scores", true));
    PAGODA_ASSIGN_OR_RETURN(const GgufValue* types, find_array(f_, "token_type", true));
    if (scores && scores->count != n)
      return corrupt(str_format("%s has %" PRIu64 " entries but there are %zu tokens",
                                key("scores").c_str(), scores->count, n));
    if (types && types->count != n)
      return corrupt(str_format("%s has %" PRIu64 " entries but there are %zu tokens",
                                key("token_type").c_str(), types->count, n));
    if (types && (types->elem_type == GgufType::kF32 || types->elem_type == GgufType::kF64))
      return corrupt(key("token_type") + " must be an array of integers");
    v_.tokens.resize(n);
    v_.token_to_id.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      TokenData& t = v_.tokens[i];
      t.text = std::string(toks->strings[i]);
      // An empty string cannot be matched or merged; llama.cpp renames it the same way.
      if (t.text.empty()) t.text = "[EMPTY_" + std::to_string(i) + "]";
      t.score = scores ? static_cast<float>(scores->array_float(i)) : 0.0f;
      t.attr = types ? attr_of_type(types->array_int(i)) : kAttrNormal;
      const auto [it, inserted] = v_.token_to_id.emplace(t.text, static_cast<TokenId>(i));
      if (!inserted)
        return corrupt(str_format("duplicate token in vocabulary: '%s' has ids %d and %zu",
                                  t.text.c_str(), it->second, i));
    }
    return Status::ok();
  }

  // Reads one special id. Ids we rely on must be valid; others are dropped with a warning
  // when out of range, as llama.cpp does, since some published files carry such values.
  Status read_id(std::string_view name, TokenId* id, bool essential) {
    if (*id >= v_.n_tokens()) *id = -1;  // a default past the vocabulary means "none"
    const GgufValue* v = f_.find(key(name));
    if (v == nullptr) return Status::ok();
    const auto x = v->as_int();
    if (!x)
      return corrupt(key(name) + " must be an integer, found " +
                     std::string(gguf_type_name(v->type)));
    if (*x < 0 || *x >= v_.n_tokens()) {
      const std::string msg = str_format("%s = %" PRId64 " is outside the vocabulary of %d tokens",
                                         key(name).c_str(), *x, v_.n_tokens());
      if (essential) return out_of_range(msg);
      log_warn("tokenizer: " + msg + "; ignored");
      return Status::ok();
    }
    *id = static_cast<TokenId>(*x);
    return Status::ok();
  }

  Status read_special_ids() {
    PAGODA_RETURN_IF_ERROR(read_id("bos_token_id", &v_.bos, true));
    PAGODA_RETURN_IF_ERROR(read_id("eos_token_id", &v_.eos, true));
    PAGODA_RETURN_IF_ERROR(read_id("eot_token_id", &v_.eot, true));
    PAGODA_RETURN_IF_ERROR(read_id("eom_token_id", &v_.eom, true));
    PAGODA_RETURN_IF_ERROR(read_id("unknown_token_id", &v_.unk, true));
    PAGODA_RETURN_IF_ERROR(read_id("seperator_token_id", &v_.sep, false));
    PAGODA_RETURN_IF_ERROR(read_id("padding_token_id", &v_.pad, false));
    PAGODA_RETURN_IF_ERROR(read_id("mask_token_id", &v_.mask, false));
    PAGODA_RETURN_IF_ERROR(read_id("fim_pre_token_id", &v_.fim_pre, false));
    PAGODA_RETURN_IF_ERROR(read_id("fim_suf_token_id", &v_.fim_suf, false));
    PAGODA_RETURN_IF_ERROR(read_id("fim_mid_token_id", &v_.fim_mid, false));
    PAGODA_RETURN_IF_ERROR(read_id("fim_pad_token_id", &v_.fim_pad, false));
    PAGODA_RETURN_IF_ERROR(read_id("fim_rep_token_id", &v_.fim_rep, false));
    PAGODA_RETURN_IF_ERROR(read_id("fim_sep_token_id", &v_.fim_sep, false));
    PAGODA_RETURN_IF_ERROR(read_id("prefix_token_id", &v_.fim_pre, false));  // older names
    PAGODA_RETURN_IF_ERROR(read_id("suffix_token_id", &v_.fim_suf, false));
    PAGODA_RETURN_IF_ERROR(read_id("middle_token_id", &v_.fim_mid, false));

    PAGODA_ASSIGN_OR_RETURN(auto add_bos, read_bool(f_, "add_bos_token"));
    if (add_bos) v_.add_bos = *add_bos;
    PAGODA_ASSIGN_OR_RETURN(auto add_eos, read_bool(f_, "add_eos_token"));
    if (add_eos) v_.add_eos = *add_eos;
    if (v_.add_bos && v_.bos < 0)
      return corrupt(key("add_bos_token") + " is true but there is no BOS token");
    if (v_.add_eos && v_.eos < 0)
      return corrupt(key("add_eos_token") + " is true but there is no EOS token");
    return Status::ok();
  }

  // Whitespace stripping around special tokens is not stored in GGUF; llama.cpp sets it
  // for a few model families by name, and so do we.
  void apply_model_quirks() {
    std::string name, arch;
    if (auto s = f_.get_string("general.name")) name = ascii_lower(*s);
    if (auto s = f_.get_string("general.architecture")) arch = std::string(*s);
    const auto has = [](const std::string& s, std::initializer_list<std::string_view> parts) {
      for (auto p : parts)
        if (s.find(p) != std::string::npos) return true;
      return false;
    };
    const auto set = [&](std::string_view text, uint32_t bit, bool on) {
      if (auto t = v_.find(text)) {
        uint32_t& a = v_.tokens[static_cast<size_t>(*t)].attr;
        a = on ? (a | bit) : (a & ~bit);
      }
    };
    if (has(v_.pre_name, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) ||
        has(arch, {"nomic-bert-moe", "jina-bert-v3"})) {
      set("<mask>", kAttrLstrip, true);
    } else if (has(name, {"phi-3", "phi3"})) {
      for (TokenId id : v_.special_tokens) v_.tokens[static_cast<size_t>(id)].attr |= kAttrRstrip;
      set("</s>", kAttrRstrip, true);
      for (std::string_view t : {"<unk>", "<s>", "<|endoftext|>"}) set(t, kAttrRstrip, false);
    } else if (has(name, {"modern-bert"})) {
      set("[MASK]", kAttrLstrip, true);
    }
  }

  const GgufFile& f_;
  Vocab& v_;
};

}  // namespace

void Vocab::detect_special_by_text(bool mark) {
  detect(*this, mark, &eot, kEotNames);
  detect(*this, mark, &eom, kEomNames);
  detect(*this, mark, &fim_pre, kFimPreNames);
  detect(*this, mark, &fim_suf, kFimSufNames);
  detect(*this, mark, &fim_mid, kFimMidNames);
  detect(*this, mark, &fim_pad, kFimPadNames);
  detect(*this, mark, &fim_rep, kFimRepNames);
  detect(*this, mark, &fim_sep, kFimSepNames);

  // Control tokens named "unused" are placeholders.
  if (mark)
    for (TokenData& t : tokens)
      if ((t.attr & kAttrControl) && t.text.find("unused") != std::string::npos)
        t.attr |= kAttrUnused;

  auto& eog = end_of_generation;
  for (TokenId id : {fim_pad, fim_rep, fim_sep})
    if (id >= 0) eog.insert(id);
  for (std::string_view n : kEogNames) {
    if (auto t = find(n)) {
      eog.insert(*t);
      if (mark) tokens[static_cast<size_t>(*t)].attr |= kAttrControl;
    }
  }
  // gpt-oss channel markers must always render.
  if (mark)
    for (std::string_view n : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})
      if (auto t = find(n)) tokens[static_cast<size_t>(*t)].attr = kAttrUserDefined;
  for (TokenId id : {eos, eot, eom})
    if (id >= 0) eog.insert(id);

  // In the harmony (gpt-oss, solar-open) vocabularies <|end|> ends a message, not the
  // generation, when <|return|> and <|call|> (or <|calls|> and <|flush|>) exist.
  const auto in_eog = [&](std::string_view n) {
    auto t = find(n);
    return t && eog.count(*t) > 0;
  };
  const bool has_call = in_eog("<|call|>") || in_eog("<|calls|>");
  if (in_eog("<|end|>") &&
      ((in_eog("<|return|>") && has_call) || (has_call && in_eog("<|flush|>")))) {
    const TokenId end = *find("<|end|>");
    eog.erase(end);
    if (mark) tokens[static_cast<size_t>(end)].attr = kAttrUserDefined;
  }
  // Gemma 4: </s> is an ordinary token there.
  if (in_eog("<|tool_response>") && in_eog("</s>")) {
    const TokenId s = *find("</s>");
    eog.erase(s);
    if (mark) tokens[static_cast<size_t>(s)].attr = kAttrNormal;
  }
}

void Vocab::build_special_list() {
  special_tokens.clear();
  for (TokenId id = 0; id < n_tokens(); ++id)
    if (attr(id) & (kAttrControl | kAttrUserDefined | kAttrUnknown)) special_tokens.push_back(id);
  std::stable_sort(special_tokens.begin(), special_tokens.end(), [&](TokenId a, TokenId b) {
    return tokens[static_cast<size_t>(a)].text.size() > tokens[static_cast<size_t>(b)].text.size();
  });
}

Result<Vocab> Vocab::from_gguf(const GgufFile& file) {
  Vocab v;
  Loader loader(file, &v);
  Status s = loader.load();
  if (!s.is_ok()) return s.with_context("tokenizer");
  return v;
}

}  // namespace pagoda
