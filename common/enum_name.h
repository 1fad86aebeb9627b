#ifndef LOCALSGD_COMMON_ENUM_NAME_H_
#define LOCALSGD_COMMON_ENUM_NAME_H_

#include <google/protobuf/generated_enum_reflection.h>

#include <string>

namespace localsgd {

// The enum's value prefix from its type name: RunState -> "RUN_STATE_".
std::string EnumValuePrefix(const std::string& type_name);

// EnumName of the value `number` of `type`.
std::string EnumValueName(const google::protobuf::EnumDescriptor* type, int number);

// The one way a proto enum value is named for people (status, the CLI, the page, logs): its
// name without the enum's prefix (RUN_STATE_RUNNING -> "RUNNING", CODEC_FP32 -> "FP32"), or
// "UNKNOWN_<n>" for a number the proto does not define.
template <typename E>
std::string EnumName(E value) {
  return EnumValueName(google::protobuf::GetEnumDescriptor<E>(), static_cast<int>(value));
}

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_ENUM_NAME_H_
