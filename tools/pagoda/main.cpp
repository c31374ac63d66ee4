#include <cstdio>
#include <cstring>

int cmd_tokenize(int argc, char** argv);

int main(int argc, char** argv) {
  // Temporary dispatch so that `pagoda tokenize` can be tested; the CLI owner replaces this.
  if (argc > 1 && std::strcmp(argv[1], "tokenize") == 0) return cmd_tokenize(argc - 1, argv + 1);
  std::puts("pagoda");
  return 0;
}
