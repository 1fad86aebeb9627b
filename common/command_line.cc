#include "common/command_line.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "absl/flags/parse.h"

namespace localsgd {
namespace {

// While Abseil parses: the status its exit(1) is turned into (-1: none, parsing is over).
std::atomic<int> g_parse_exit{-1};

void OnExitWhileParsing() {
  const int code = g_parse_exit.load();
  if (code < 0) return;
  std::cout.flush();
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(code);
}

bool AsksForHelp(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const char* arg = argv[i];
    if (std::strcmp(arg, "--") == 0) return false;
    while (*arg == '-') ++arg;
    for (const char* flag : {"help", "helpfull", "helpshort", "helppackage", "version"}) {
      const size_t n = std::strlen(flag);
      if (std::strncmp(arg, flag, n) == 0 && (arg[n] == '\0' || arg[n] == '=')) return true;
    }
  }
  return false;
}

}  // namespace

std::vector<char*> ParseCommandLine(int argc, char** argv) {
  static const bool registered = std::atexit(OnExitWhileParsing) == 0;
  (void)registered;
  g_parse_exit.store(AsksForHelp(argc, argv) ? 0 : 2);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  g_parse_exit.store(-1);
  return args;
}

}  // namespace localsgd
