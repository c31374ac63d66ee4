#include "tokenizer/hf_vocab.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "tokenizer/unicode.h"

namespace pagoda {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr std::string_view kTok = "tokenizer.json: ";
constexpr std::string_view kCfg = "tokenizer_config.json: ";

// The pattern ByteLevel splits with when use_regex is set (Hugging Face's GPT-2 pattern).
constexpr std::string_view kByteLevelPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

Status bad(std::string_view file, const std::string& what) {
  return corrupt(std::string(file) + what);
}

// A member that must be an object (or absent: nullptr).
const json* member(const json& j, const char* name) {
  auto it = j.find(name);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

Result<std::optional<bool>> opt_bool(const json& j, const char* name, const std::string& where) {
  const json* v = member(j, name);
  if (v == nullptr) return std::optional<bool>();
  if (!v->is_boolean()) return bad(kTok, where + "." + name + " must be a boolean");
  return std::optional<bool>(v->get<bool>());
}

Result<std::string> str_field(const json& j, const char* name, const std::string& where,
                              std::string_view file = kTok) {
  const json* v = member(j, name);
  if (v == nullptr || !v->is_string()) return bad(file, where + "." + name + " must be a string");
  return v->get<std::string>();
}

std::string type_of(const json& j) {
  auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string("(no type)");
}

// A regex matching `s` literally.
std::string regex_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}-/").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

// tokenizer_config.json's chat_template: a string, or named templates of which the
// "default" one is taken; "" when there is none.
Result<std::string> config_chat_template(const json& cfg) {
  const json* ct = member(cfg, "chat_template");
  if (ct == nullptr) return std::string();
  if (ct->is_string()) return ct->get<std::string>();
  if (!ct->is_array())
    return bad(kCfg, "chat_template must be a string or a list of {name, template}");
  for (const json& e : *ct)
    if (e.is_object() && member(e, "name") && e["name"] == "default" && member(e, "template") &&
        e["template"].is_string())
      return e["template"].get<std::string>();
  return std::string();
}

class Parser {
 public:
  explicit Parser(HfTokenizer* out) : t_(*out), v_(out->vocab) {}

  Status parse(const HfTokenizerFiles& f) {
    json top = json::parse(f.tokenizer_json, nullptr, /*allow_exceptions=*/false);
    if (top.is_discarded()) return bad(kTok, "not valid JSON");
    if (!top.is_object()) return bad(kTok, "the top level must be an object");
    const json* model = member(top, "model");
    if (model == nullptr || !model->is_object()) return bad(kTok, "model must be an object");
    PAGODA_RETURN_IF_ERROR(read_model(*model));
    PAGODA_RETURN_IF_ERROR(read_added_tokens(member(top, "added_tokens")));
    PAGODA_RETURN_IF_ERROR(read_merges(*model));
    if (const json* n = member(top, "normalizer")) PAGODA_RETURN_IF_ERROR(read_normalizer(*n));
    if (const json* p = member(top, "pre_tokenizer")) PAGODA_RETURN_IF_ERROR(read_pre(*p, true));
    if (const json* p = member(top, "post_processor")) PAGODA_RETURN_IF_ERROR(read_post(*p));
    if (const json* d = member(top, "decoder")) read_decoder(*d);
    PAGODA_RETURN_IF_ERROR(read_config(f.tokenizer_config));
    PAGODA_RETURN_IF_ERROR(read_generation_config(f.generation_config));
    t_.chat_template = f.chat_template_jinja.empty() ? config_template_ : f.chat_template_jinja;

    v_.type = t_.steps.byte_level ? VocabType::kBpe : VocabType::kSpm;
    v_.hf_bpe = true;
    v_.unicode_strip = true;
    v_.pre.canonical = "tokenizer.json";
    v_.pre.regex_only = true;
    v_.detect_special_by_text(/*mark=*/false);
    v_.build_special_list();
    return Status::ok();
  }

 private:
  Status read_model(const json& m) {
    const std::string type = type_of(m);
    // Files from before "type" was written hold BPE's fields alone.
    if (type != "BPE" && !(type == "(no type)" && m.contains("merges")))
      return unsupported(std::string(kTok) + "model " + type +
                         " is not supported (supported: BPE)");
    if (const json* d = member(m, "dropout"); d && !(d->is_number() && d->get<double>() == 0))
      return unsupported(std::string(kTok) + "model.dropout is not supported");
    for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      const json* a = member(m, affix);
      if (a && !(a->is_string() && a->get<std::string>().empty()))
        return unsupported(std::string(kTok) + "model." + affix + " is not supported");
    }
    PAGODA_ASSIGN_OR_RETURN(auto fallback, opt_bool(m, "byte_fallback", "model"));
    PAGODA_ASSIGN_OR_RETURN(auto fuse, opt_bool(m, "fuse_unk", "model"));
    PAGODA_ASSIGN_OR_RETURN(auto ignore, opt_bool(m, "ignore_merges", "model"));
    v_.byte_fallback = fallback.value_or(false);
    v_.fuse_unk = fuse.value_or(false);
    v_.pre.ignore_merges = ignore.value_or(false);

    const json* vocab = member(m, "vocab");
    if (vocab == nullptr || !vocab->is_object()) return bad(kTok, "model.vocab must be an object");
    for (auto it = vocab->begin(); it != vocab->end(); ++it)
      PAGODA_RETURN_IF_ERROR(set_token(it.value(), it.key(), "model.vocab['" + it.key() + "']"));
    if (const json* unk = member(m, "unk_token")) {
      if (!unk->is_string()) return bad(kTok, "model.unk_token must be a string");
      auto id = v_.find(unk->get<std::string>());
      if (!id) return bad(kTok, "model.unk_token '" + unk->get<std::string>() + "' is not a token");
      v_.bpe_unk = *id;
    }
    return Status::ok();
  }

  // Places token `text` at the id `id_json` holds.
  Status set_token(const json& id_json, const std::string& text, const std::string& where) {
    if (!id_json.is_number_integer()) return bad(kTok, where + " must be an integer id");
    const int64_t id = id_json.get<int64_t>();
    if (id < 0 || id >= (int64_t{1} << 28))
      return bad(kTok, where + str_format(" = %lld is not a valid id", static_cast<long long>(id)));
    if (text.empty()) return bad(kTok, where + " is an empty token");
    const size_t i = static_cast<size_t>(id);
    if (i >= v_.tokens.size()) {
      TokenData hole;
      hole.attr = kAttrUndefined;  // until a token claims the id
      v_.tokens.resize(i + 1, hole);
    }
    TokenData& t = v_.tokens[i];
    if (t.attr != kAttrUndefined) {
      if (t.text == text) return Status::ok();  // an added token repeating its vocab entry
      // An added token may give an id a new text; the vocab's own text then stops matching.
      if (where.rfind("model.vocab", 0) == 0)
        return bad(kTok, where + str_format(": id %zu is also '%s'", i, t.text.c_str()));
      v_.token_to_id.erase(t.text);
    }
    const auto [it, inserted] = v_.token_to_id.emplace(text, static_cast<TokenId>(i));
    if (!inserted && it->second != static_cast<TokenId>(i))
      return bad(kTok, where + str_format(": '%s' already has id %d", text.c_str(), it->second));
    t.text = text;
    t.attr = kAttrNormal;
    return Status::ok();
  }

  Status read_added_tokens(const json* added) {
    if (added != nullptr) {
      if (!added->is_array()) return bad(kTok, "added_tokens must be an array");
      for (size_t k = 0; k < added->size(); ++k) {
        const json& a = (*added)[k];
        const std::string where = str_format("added_tokens[%zu]", k);
        if (!a.is_object()) return bad(kTok, where + " must be an object");
        PAGODA_ASSIGN_OR_RETURN(std::string content, str_field(a, "content", where));
        const json* id = member(a, "id");
        if (id == nullptr) return bad(kTok, where + ".id is missing");
        PAGODA_RETURN_IF_ERROR(set_token(*id, content, where));
        PAGODA_ASSIGN_OR_RETURN(auto single_word, opt_bool(a, "single_word", where));
        if (single_word.value_or(false))
          return unsupported(std::string(kTok) + where + ": single_word is not supported");
        PAGODA_ASSIGN_OR_RETURN(auto special, opt_bool(a, "special", where));
        PAGODA_ASSIGN_OR_RETURN(auto lstrip, opt_bool(a, "lstrip", where));
        PAGODA_ASSIGN_OR_RETURN(auto rstrip, opt_bool(a, "rstrip", where));
        uint32_t attr = special.value_or(false) ? kAttrControl : kAttrUserDefined;
        if (lstrip.value_or(false)) attr |= kAttrLstrip;
        if (rstrip.value_or(false)) attr |= kAttrRstrip;
        v_.tokens[static_cast<size_t>(id->get<int64_t>())].attr = attr;
      }
    }
    if (v_.tokens.empty()) return bad(kTok, "model.vocab is empty");
    for (size_t i = 0; i < v_.tokens.size(); ++i) {
      TokenData& t = v_.tokens[i];
      if (t.attr != kAttrUndefined) continue;
      // No token has this id: it gets a name nothing can match, and renders as nothing.
      t.text = "[EMPTY_" + std::to_string(i) + "]";
      t.attr = kAttrUnused;
      v_.token_to_id.emplace(t.text, static_cast<TokenId>(i));
    }
    // Byte tokens render as their byte.
    if (v_.byte_fallback)
      for (int b = 0; b < 256; ++b)
        if (auto id = v_.find(str_format("<0x%02X>", b)))
          if (v_.tokens[static_cast<size_t>(*id)].attr == kAttrNormal)
            v_.tokens[static_cast<size_t>(*id)].attr = kAttrByte;
    return Status::ok();
  }

  Status read_merges(const json& m) {
    const json* merges = member(m, "merges");
    if (merges == nullptr) return Status::ok();  // a BPE without merges is a word list
    if (!merges->is_array()) return bad(kTok, "model.merges must be an array");
    v_.merge_ranks.reserve(merges->size());
    std::string key;
    for (size_t i = 0; i < merges->size(); ++i) {
      const json& e = (*merges)[i];
      key.clear();
      if (e.is_string()) {
        // "a b": tokens holding a space need the pair form, so exactly one space.
        const std::string& s = e.get_ref<const std::string&>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() ||
            s.find(' ', sp + 1) != std::string::npos)
          return bad(kTok, str_format("model.merges[%zu] is not \"left right\"", i));
        key.append(s, 0, sp).append(1, '\n').append(s, sp + 1, std::string::npos);
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        key.append(e[0].get_ref<const std::string&>())
            .append(1, '\n')
            .append(e[1].get_ref<const std::string&>());
      } else {
        return bad(kTok, str_format("model.merges[%zu] must be a string or a pair of strings", i));
      }
      v_.merge_ranks.emplace(key, static_cast<int32_t>(i));  // the first rank wins
    }
    return Status::ok();
  }

  Status read_normalizer(const json& n) {
    if (!n.is_object()) return bad(kTok, "normalizer must be an object");
    const std::string type = type_of(n);
    if (type == "Sequence") {
      const json* list = member(n, "normalizers");
      if (list == nullptr || !list->is_array())
        return bad(kTok, "normalizer Sequence needs a normalizers array");
      for (const json& k : *list) PAGODA_RETURN_IF_ERROR(read_normalizer(k));
      return Status::ok();
    }
    HfNormalizeStep step;
    if (type == "Prepend") {
      PAGODA_ASSIGN_OR_RETURN(step.text, str_field(n, "prepend", "normalizer Prepend"));
    } else if (type == "Replace") {
      const json* p = member(n, "pattern");
      if (p == nullptr || !p->is_object()) return bad(kTok, "normalizer Replace needs a pattern");
      if (member(*p, "String") == nullptr)
        return unsupported(std::string(kTok) +
                           "normalizer Replace with a Regex pattern is not supported");
      PAGODA_ASSIGN_OR_RETURN(step.text, str_field(*p, "String", "normalizer Replace.pattern"));
      PAGODA_ASSIGN_OR_RETURN(step.replacement, str_field(n, "content", "normalizer Replace"));
      step.kind = HfNormalizeStep::Kind::kReplace;
    } else if (type == "NFC") {
      step.kind = HfNormalizeStep::Kind::kNfc;
    } else if (type == "NFD") {
      step.kind = HfNormalizeStep::Kind::kNfd;
    } else if (type == "NFKC") {
      step.kind = HfNormalizeStep::Kind::kNfkc;
    } else if (type == "NFKD") {
      step.kind = HfNormalizeStep::Kind::kNfkd;
    } else if (type == "Lowercase") {
      step.kind = HfNormalizeStep::Kind::kLowercase;
    } else {
      // Precompiled (SentencePiece's character map), BertNormalizer, StripAccents, Strip,
      // ByteLevel and the rest are refused rather than approximated.
      return unsupported(std::string(kTok) + "normalizer " + type +
                         " is not supported (supported: Prepend, Replace, NFC, NFD, NFKC, NFKD, "
                         "Lowercase, Sequence)");
    }
    t_.steps.normalizer.push_back(std::move(step));
    return Status::ok();
  }

  Status add_split(const std::string& pattern, const std::string& where) {
    // Our regex engine reads \p{..} as llama.cpp does: only whole categories are exact.
    for (std::string_view sub : {"\\p{Lu}", "\\p{Ll}", "\\p{Lt}", "\\p{Lm}", "\\p{Lo}"})
      if (pattern.find(sub) != std::string::npos)
        return unsupported(std::string(kTok) + where + ": the letter subcategory " +
                           std::string(sub) + " is not supported");
    PreTokenizerSpec spec;
    spec.canonical = where;
    spec.patterns = {pattern};
    spec.regex_only = true;
    auto pre = PreTokenizer::create(spec);
    if (!pre.is_ok()) return unsupported(std::string(kTok) + where + ": " + pre.status().message());
    HfPreStep step;
    step.split = std::make_shared<const PreTokenizer>(std::move(pre).value());
    t_.steps.pre_tokenizer.push_back(std::move(step));
    return Status::ok();
  }

  Status read_pre(const json& p, bool last) {
    if (!p.is_object()) return bad(kTok, "pre_tokenizer must be an object");
    const std::string type = type_of(p);
    if (t_.steps.byte_level)
      return unsupported(std::string(kTok) + "pre_tokenizer " + type +
                         " after ByteLevel is not supported");
    if (type == "Sequence") {
      const json* list = member(p, "pretokenizers");
      if (list == nullptr || !list->is_array())
        return bad(kTok, "pre_tokenizer Sequence needs a pretokenizers array");
      for (size_t k = 0; k < list->size(); ++k)
        PAGODA_RETURN_IF_ERROR(read_pre((*list)[k], last && k + 1 == list->size()));
      return Status::ok();
    }
    if (type == "Split") {
      const json* pat = member(p, "pattern");
      if (pat == nullptr || !pat->is_object())
        return bad(kTok, "pre_tokenizer Split needs a pattern");
      PAGODA_ASSIGN_OR_RETURN(std::string behavior,
                              str_field(p, "behavior", "pre_tokenizer Split"));
      if (behavior != "Isolated")
        return unsupported(std::string(kTok) + "pre_tokenizer Split with behavior " + behavior +
                           " is not supported (supported: Isolated)");
      PAGODA_ASSIGN_OR_RETURN(auto invert, opt_bool(p, "invert", "pre_tokenizer Split"));
      if (invert.value_or(false))
        return unsupported(std::string(kTok) + "pre_tokenizer Split with invert is not supported");
      std::string regex;
      if (member(*pat, "Regex") != nullptr) {
        PAGODA_ASSIGN_OR_RETURN(regex, str_field(*pat, "Regex", "pre_tokenizer Split.pattern"));
      } else {
        PAGODA_ASSIGN_OR_RETURN(std::string s,
                                str_field(*pat, "String", "pre_tokenizer Split.pattern"));
        regex = regex_escape(s);
      }
      return add_split(regex, "pre_tokenizer Split");
    }
    if (type == "Digits") {
      PAGODA_ASSIGN_OR_RETURN(auto single,
                              opt_bool(p, "individual_digits", "pre_tokenizer Digits"));
      return add_split(single.value_or(false) ? "\\p{N}" : "\\p{N}+", "pre_tokenizer Digits");
    }
    if (type == "ByteLevel") {
      if (!last)
        return unsupported(std::string(kTok) +
                           "pre_tokenizer ByteLevel before other pre-tokenizers is not supported");
      PAGODA_ASSIGN_OR_RETURN(auto prefix,
                              opt_bool(p, "add_prefix_space", "pre_tokenizer ByteLevel"));
      PAGODA_ASSIGN_OR_RETURN(auto use_regex, opt_bool(p, "use_regex", "pre_tokenizer ByteLevel"));
      if (prefix.value_or(true)) {
        HfPreStep step;
        step.kind = HfPreStep::Kind::kSpacePrefix;
        t_.steps.pre_tokenizer.push_back(step);
      }
      if (use_regex.value_or(true))
        PAGODA_RETURN_IF_ERROR(
            add_split(std::string(kByteLevelPattern), "pre_tokenizer ByteLevel"));
      t_.steps.byte_level = true;
      return Status::ok();
    }
    if (type == "Metaspace") {
      HfPreStep step;
      step.kind = HfPreStep::Kind::kMetaspace;
      PAGODA_ASSIGN_OR_RETURN(step.replacement,
                              str_field(p, "replacement", "pre_tokenizer Metaspace"));
      if (step.replacement.empty())
        return bad(kTok, "pre_tokenizer Metaspace.replacement is empty");
      if (const json* scheme = member(p, "prepend_scheme")) {
        const std::string s = scheme->is_string() ? scheme->get<std::string>() : "";
        if (s == "always") {
          step.prepend = HfPreStep::Prepend::kAlways;
        } else if (s == "first") {
          step.prepend = HfPreStep::Prepend::kFirst;
        } else if (s == "never") {
          step.prepend = HfPreStep::Prepend::kNever;
        } else {
          return bad(kTok, "pre_tokenizer Metaspace.prepend_scheme must be always, first or never");
        }
      } else {  // older files: add_prefix_space
        PAGODA_ASSIGN_OR_RETURN(auto prefix,
                                opt_bool(p, "add_prefix_space", "pre_tokenizer Metaspace"));
        step.prepend =
            prefix.value_or(true) ? HfPreStep::Prepend::kAlways : HfPreStep::Prepend::kNever;
      }
      PAGODA_ASSIGN_OR_RETURN(auto split, opt_bool(p, "split", "pre_tokenizer Metaspace"));
      const std::string r = regex_escape(step.replacement);
      const bool one_char = unicode::decode(step.replacement).size() == 1;
      t_.steps.pre_tokenizer.push_back(std::move(step));
      if (!split.value_or(true)) return Status::ok();
      // Split before each replacement character, which starts the next word (MergedWithNext).
      if (!one_char)
        return unsupported(std::string(kTok) +
                           "pre_tokenizer Metaspace splitting on a replacement of more than one "
                           "character is not supported");
      return add_split(r + "[^" + r + "]*|[^" + r + "]+", "pre_tokenizer Metaspace");
    }
    return unsupported(std::string(kTok) + "pre_tokenizer " + type + " is not supported");
  }

  // The id a TemplateProcessing special token stands for.
  Result<TokenId> template_token(const json& proc, const std::string& name) {
    const json* specials = member(proc, "special_tokens");
    const json* entry = specials ? member(*specials, name.c_str()) : nullptr;
    const json* ids = entry ? member(*entry, "ids") : nullptr;
    if (ids == nullptr || !ids->is_array())
      return bad(kTok, "post_processor.special_tokens['" + name + "'].ids is missing");
    if (ids->size() != 1 || !(*ids)[0].is_number_integer())
      return unsupported(std::string(kTok) + "post_processor token '" + name +
                         "' of other than one id is not supported");
    const int64_t id = (*ids)[0].get<int64_t>();
    if (id < 0 || id >= v_.n_tokens())
      return bad(kTok, "post_processor token '" + name + "' has an id outside the vocabulary");
    return static_cast<TokenId>(id);
  }

  Status read_post(const json& p) {
    if (!p.is_object()) return bad(kTok, "post_processor must be an object");
    const std::string type = type_of(p);
    if (type == "ByteLevel") return Status::ok();  // offsets only
    if (type == "Sequence") {
      const json* list = member(p, "processors");
      if (list == nullptr || !list->is_array())
        return bad(kTok, "post_processor Sequence needs a processors array");
      for (const json& k : *list) PAGODA_RETURN_IF_ERROR(read_post(k));
      return Status::ok();
    }
    if (type != "TemplateProcessing")
      return unsupported(std::string(kTok) + "post_processor " + type + " is not supported");
    const json* single = member(p, "single");
    if (single == nullptr || !single->is_array())
      return bad(kTok, "post_processor.single must be an array");
    std::vector<TokenId> before, after;
    bool seen_text = false;
    for (const json& item : *single) {
      if (!item.is_object()) return bad(kTok, "post_processor.single items must be objects");
      if (member(item, "Sequence") != nullptr) {
        if (seen_text) return unsupported(std::string(kTok) + "post_processor: text twice");
        seen_text = true;
        continue;
      }
      const json* st = member(item, "SpecialToken");
      if (st == nullptr || !st->is_object())
        return bad(kTok, "post_processor.single items must be Sequence or SpecialToken");
      PAGODA_ASSIGN_OR_RETURN(std::string name,
                              str_field(*st, "id", "post_processor SpecialToken"));
      PAGODA_ASSIGN_OR_RETURN(TokenId id, template_token(p, name));
      (seen_text ? after : before).push_back(id);
    }
    if (before.size() > 1 || after.size() > 1)
      return unsupported(std::string(kTok) +
                         "post_processor: more than one token at either end is not supported");
    if (!before.empty()) {
      template_bos_ = before[0];
      v_.add_bos = true;
    }
    if (!after.empty()) {
      template_eos_ = after[0];
      v_.add_eos = true;
    }
    return Status::ok();
  }

  // The decoders that take the first space off (Strip, Metaspace) undo a prefix space.
  void read_decoder(const json& d) {
    const std::string type = type_of(d);
    if (type == "Sequence") {
      if (const json* list = member(d, "decoders"); list && list->is_array())
        for (const json& k : *list) read_decoder(k);
    } else if (type == "Strip") {
      const json* start = member(d, "start");
      if (start && start->is_number_integer() && start->get<int64_t>() > 0)
        v_.add_space_prefix = true;
    } else if (type == "Metaspace") {
      const json* scheme = member(d, "prepend_scheme");
      v_.add_space_prefix =
          !(scheme && scheme->is_string() && scheme->get<std::string>() == "never");
    }
  }

  // "<s>" or {"content": "<s>", ...}: the token's id, -1 for null.
  Result<TokenId> config_token(const json& cfg, const char* name) {
    const json* v = member(cfg, name);
    if (v == nullptr) return TokenId{-1};
    const json* text = v->is_object() ? member(*v, "content") : v;
    if (text == nullptr || !text->is_string())
      return bad(kCfg, std::string(name) + " must be a string or an object with content");
    auto id = v_.find(text->get<std::string>());
    if (!id)
      return bad(kCfg, std::string(name) + " '" + text->get<std::string>() + "' is not a token");
    return *id;
  }

  Status read_config(const std::string& text) {
    v_.bos = template_bos_;
    v_.eos = template_eos_;
    if (text.empty()) return Status::ok();
    json cfg = json::parse(text, nullptr, false);
    if (cfg.is_discarded() || !cfg.is_object()) return bad(kCfg, "not a JSON object");
    PAGODA_ASSIGN_OR_RETURN(TokenId bos, config_token(cfg, "bos_token"));
    PAGODA_ASSIGN_OR_RETURN(TokenId eos, config_token(cfg, "eos_token"));
    PAGODA_ASSIGN_OR_RETURN(v_.unk, config_token(cfg, "unk_token"));
    PAGODA_ASSIGN_OR_RETURN(v_.pad, config_token(cfg, "pad_token"));
    if (bos >= 0) v_.bos = bos;
    if (eos >= 0) v_.eos = eos;
    // Stated flags win over the post-processor, as transformers' tokenizer classes rebuild
    // the post-processor from them.
    for (auto [name, flag, id] : {std::tuple{"add_bos_token", &v_.add_bos, v_.bos},
                                  std::tuple{"add_eos_token", &v_.add_eos, v_.eos}}) {
      const json* f = member(cfg, name);
      if (f == nullptr) continue;
      if (!f->is_boolean()) return bad(kCfg, std::string(name) + " must be a boolean");
      *flag = f->get<bool>();
      if (*flag && id < 0) return bad(kCfg, std::string(name) + " is true but there is no token");
    }
    PAGODA_ASSIGN_OR_RETURN(config_template_, config_chat_template(cfg));
    return Status::ok();
  }

  Status read_generation_config(const std::string& text) {
    if (text.empty()) return Status::ok();
    constexpr std::string_view kGen = "generation_config.json: ";
    json cfg = json::parse(text, nullptr, false);
    if (cfg.is_discarded() || !cfg.is_object()) return bad(kGen, "not a JSON object");
    const json* e = member(cfg, "eos_token_id");
    if (e == nullptr) return Status::ok();
    const json list = e->is_array() ? *e : json::array({*e});
    for (const json& id : list) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= v_.n_tokens())
        return bad(kGen, "eos_token_id must be token ids in the vocabulary");
      v_.end_of_generation.insert(static_cast<TokenId>(id.get<int64_t>()));
    }
    return Status::ok();
  }

  HfTokenizer& t_;
  Vocab& v_;
  TokenId template_bos_ = -1, template_eos_ = -1;
  std::string config_template_;
};

Result<std::string> read_bounded(const fs::path& path, size_t limit, bool required) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    if (required) return not_found("'" + path.string() + "' does not exist");
    return std::string();
  }
  const auto size = fs::file_size(path, ec);
  if (ec) return io_error("cannot read '" + path.string() + "': " + ec.message());
  if (size > limit)
    return invalid_argument(str_format("'%s' is %llu bytes, over the limit of %zu",
                                       path.string().c_str(), static_cast<unsigned long long>(size),
                                       limit));
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("cannot read '" + path.string() + "'");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return io_error("error reading '" + path.string() + "'");
  return text.str();
}

}  // namespace

Result<HfTokenizer> parse_hf_tokenizer(const HfTokenizerFiles& files) {
  if (files.tokenizer_json.size() > kMaxTokenizerJsonBytes)
    return invalid_argument("tokenizer.json is over 256 MiB");
  HfTokenizer t;
  Parser p(&t);
  PAGODA_RETURN_IF_ERROR(p.parse(files));
  return t;
}

bool is_hf_tokenizer_folder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / "tokenizer.json", ec);
}

Result<HfTokenizerFiles> read_hf_tokenizer_files(const std::string& dir) {
  const fs::path d(dir);
  HfTokenizerFiles f;
  PAGODA_ASSIGN_OR_RETURN(f.tokenizer_json,
                          read_bounded(d / "tokenizer.json", kMaxTokenizerJsonBytes, true));
  PAGODA_ASSIGN_OR_RETURN(f.tokenizer_config,
                          read_bounded(d / "tokenizer_config.json", kMaxHfSideFileBytes, false));
  PAGODA_ASSIGN_OR_RETURN(f.generation_config,
                          read_bounded(d / "generation_config.json", kMaxHfSideFileBytes, false));
  PAGODA_ASSIGN_OR_RETURN(f.chat_template_jinja,
                          read_bounded(d / "chat_template.jinja", kMaxHfSideFileBytes, false));
  return f;
}

Result<HfTokenizer> load_hf_tokenizer(const std::string& dir) {
  PAGODA_ASSIGN_OR_RETURN(HfTokenizerFiles files, read_hf_tokenizer_files(dir));
  auto t = parse_hf_tokenizer(files);
  if (!t.is_ok()) return t.status().with_context("'" + dir + "'");
  return t;
}

Result<std::string> load_hf_chat_template(const std::string& dir) {
  const fs::path d(dir);
  PAGODA_ASSIGN_OR_RETURN(std::string jinja,
                          read_bounded(d / "chat_template.jinja", kMaxHfSideFileBytes, false));
  if (!jinja.empty()) return jinja;
  PAGODA_ASSIGN_OR_RETURN(std::string text,
                          read_bounded(d / "tokenizer_config.json", kMaxHfSideFileBytes, false));
  if (text.empty()) return std::string();
  json cfg = json::parse(text, nullptr, false);
  if (cfg.is_discarded() || !cfg.is_object()) return bad(kCfg, "not a JSON object");
  auto t = config_chat_template(cfg);
  if (!t.is_ok()) return t.status().with_context("'" + dir + "'");
  return t;
}

}  // namespace pagoda
