#ifndef LOCALSGD_COMMON_COMMAND_LINE_H_
#define LOCALSGD_COMMON_COMMAND_LINE_H_

#include <vector>

namespace localsgd {

// absl::ParseCommandLine with the exit statuses of the project's binaries: 0 after --help,
// --helpfull, --helpshort, --helppackage or --version; 2 (a usage error) on an unknown flag
// or a bad flag value (Abseil itself exits 1 in every case). Returns the positional
// arguments, program name first.
std::vector<char*> ParseCommandLine(int argc, char** argv);

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_COMMAND_LINE_H_
