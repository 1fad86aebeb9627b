#include "common/enum_name.h"

#include <google/protobuf/descriptor.h>

#include <cctype>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace localsgd {

std::string EnumValuePrefix(const std::string& type_name) {
  std::string prefix;
  for (size_t i = 0; i < type_name.size(); ++i) {
    const char c = type_name[i];
    if (i > 0 && std::isupper(static_cast<unsigned char>(c))) prefix += '_';
    prefix += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return prefix + "_";
}

std::string EnumValueName(const google::protobuf::EnumDescriptor* type, int number) {
  const google::protobuf::EnumValueDescriptor* found = type->FindValueByNumber(number);
  if (found == nullptr) return absl::StrCat("UNKNOWN_", number);
  const std::string prefix = EnumValuePrefix(type->name());
  const std::string& name = found->name();
  return absl::StartsWith(name, prefix) ? name.substr(prefix.size()) : name;
}

}  // namespace localsgd
