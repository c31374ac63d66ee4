// The subcommands of the pagoda executable; argv[0] is the subcommand's name.
#pragma once

namespace pagoda::cli {

int cmd_run(int argc, char** argv);
int cmd_logits(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_perplexity(int argc, char** argv);
int cmd_imatrix(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_quantize(int argc, char** argv);
int cmd_mkmodel(int argc, char** argv);
int cmd_info(int argc, char** argv);
int cmd_generate(int argc, char** argv);
int cmd_plan(int argc, char** argv);
int cmd_template(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_cuda_check(int argc, char** argv);

}  // namespace pagoda::cli
