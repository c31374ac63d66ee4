// pagoda template: renders a chat template the way the server will (and as transformers'
// apply_chat_template does), printing the exact bytes.
#include <cstdio>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "pagoda/chat_template.h"
#include "tokenizer/hf_vocab.h"

namespace pagoda::cli {
namespace {

Result<nlohmann::ordered_json> read_json(const std::string& path, const char* what) {
  PAGODA_ASSIGN_OR_RETURN(std::string text, read_file(path));
  auto j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (j.is_discarded())
    return invalid_argument(std::string(what) + " '" + path + "' is not valid JSON");
  return j;
}

// Renders many small templates in one process: the semantics tests compare hundreds of
// them with jinja2.
int run_batch(const std::string& path) {
  auto text = read_file(path);
  if (!text) return fail("template", text.status());
  size_t pos = 0;
  while (pos < text->size()) {
    size_t nl = text->find('\n', pos);
    if (nl == std::string::npos) nl = text->size();
    std::string line = text->substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty()) continue;
    auto c = nlohmann::ordered_json::parse(line, nullptr, false);
    nlohmann::ordered_json result = nlohmann::ordered_json::object();
    if (c.is_discarded() || !c.is_object() || !c.contains("template") ||
        !c["template"].is_string()) {
      result["error"] = "bad case line";
    } else {
      auto tmpl = ChatTemplate::parse(c["template"].get<std::string>());
      Result<std::string> out =
          tmpl ? tmpl->render(c.value("context", nlohmann::ordered_json::object()))
               : Result<std::string>(tmpl.status());
      if (out)
        result["output"] = *out;
      else
        result["error"] = out.status().message();
    }
    std::string dumped = result.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::fwrite(dumped.data(), 1, dumped.size(), stdout);
    std::fputc('\n', stdout);
  }
  return 0;
}

}  // namespace

int cmd_template(int argc, char** argv) {
  const std::vector<FlagSpec> specs = {
      {"--template", "-t", true, "Jinja chat template file"},
      {"--model", "-m", true,
       "take the template (tokenizer.chat_template) and bos/eos from a GGUF"},
      {"--messages", "", true,
       "JSON file: a list of messages, or a request body with \"messages\" (and \"tools\")"},
      {"--tools", "", true, "JSON file with the tool definitions (a list)"},
      {"--add-generation-prompt", "", false, "end with the assistant's turn opening"},
      {"--bos-token", "", true, "bos_token text (default: the model's, else undefined)"},
      {"--eos-token", "", true, "eos_token text (default: the model's, else undefined)"},
      {"--kwargs", "", true, "JSON object of extra template variables (e.g. enable_thinking)"},
      {"--batch", "", true,
       "JSON lines of {\"template\", \"context\"}: print one JSON line per case, "
       "{\"output\": ...} or {\"error\": ...} (for tests)"},
      {"--help", "-h", false, "show this help"},
  };
  auto args = Args::parse(argc, argv, 1, specs);
  if (!args) return fail("template", args.status());
  if (args->has("--help")) {
    std::printf("%s", usage("template",
                            "(--template FILE.jinja | -m MODEL.gguf) --messages MESSAGES.json "
                            "[--add-generation-prompt] [--tools TOOLS.json] [--bos-token T] "
                            "[--eos-token T] [--kwargs JSON]",
                            specs)
                          .c_str());
    return 0;
  }
  if (args->has("--batch")) return run_batch(*args->get("--batch"));
  if (args->has("--template") == args->has("--model"))
    return fail("template", invalid_argument("give exactly one of --template FILE or -m MODEL"));
  if (!args->has("--messages"))
    return fail("template", invalid_argument("missing --messages FILE"));

  ChatTemplateInputs in;
  std::string source;
  if (args->has("--model") && is_hf_tokenizer_folder(*args->get("--model"))) {
    // A Hugging Face folder: chat_template.jinja or tokenizer_config.json's chat_template.
    auto hf = load_hf_tokenizer(*args->get("--model"));
    if (!hf) return fail("template", hf.status());
    if (hf->chat_template.empty())
      return fail("template", not_found("'" + *args->get("--model") + "' has no chat template"));
    source = hf->chat_template;
    const Vocab& v = hf->vocab;
    if (v.valid(v.bos)) in.bos_token = v.tokens[static_cast<size_t>(v.bos)].text;
    if (v.valid(v.eos)) in.eos_token = v.tokens[static_cast<size_t>(v.eos)].text;
  } else if (args->has("--model")) {
    auto loaded = load(*args->get("--model"), false, true);
    if (!loaded) return fail("template", loaded.status());
    auto tmpl = load_chat_template(*loaded->file);
    if (!tmpl) return fail("template", tmpl.status());
    if (tmpl->empty())
      return fail("template",
                  not_found("'" + *args->get("--model") + "' has no tokenizer.chat_template"));
    source = std::string(*tmpl);
    const Tokenizer& tok = *loaded->tokenizer;
    if (tok.bos() >= 0) in.bos_token = tok.token_to_piece(tok.bos(), true);
    if (tok.eos() >= 0) in.eos_token = tok.token_to_piece(tok.eos(), true);
  } else {
    auto text = read_file(*args->get("--template"));
    if (!text) return fail("template", text.status());
    source = std::move(*text);
  }

  auto messages = read_json(*args->get("--messages"), "--messages");
  if (!messages) return fail("template", messages.status());
  if (messages->is_object() && messages->contains("messages")) {
    in.messages = (*messages)["messages"];
    if (messages->contains("tools")) in.tools = (*messages)["tools"];
  } else {
    in.messages = std::move(*messages);
  }
  if (!in.messages.is_array())
    return fail("template", invalid_argument("--messages must hold a JSON list of messages"));
  if (args->has("--tools")) {
    auto tools = read_json(*args->get("--tools"), "--tools");
    if (!tools) return fail("template", tools.status());
    in.tools = std::move(*tools);
  }
  if (args->has("--kwargs")) {
    auto extra = nlohmann::ordered_json::parse(*args->get("--kwargs"), nullptr, false);
    if (extra.is_discarded() || !extra.is_object())
      return fail("template", invalid_argument("--kwargs must be a JSON object"));
    in.extra = std::move(extra);
  }
  in.add_generation_prompt = args->has("--add-generation-prompt");
  if (auto b = args->get("--bos-token")) in.bos_token = *b;
  if (auto e = args->get("--eos-token")) in.eos_token = *e;

  auto tmpl = ChatTemplate::parse(source);
  if (!tmpl) return fail("template", tmpl.status());
  auto out = tmpl->render(make_chat_context(in));
  if (!out) return fail("template", out.status());
  std::fwrite(out->data(), 1, out->size(), stdout);
  return 0;
}

}  // namespace pagoda::cli
