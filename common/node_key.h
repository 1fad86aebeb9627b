#ifndef LOCALSGD_COMMON_NODE_KEY_H_
#define LOCALSGD_COMMON_NODE_KEY_H_

#include <string>

#include "absl/strings/string_view.h"

namespace localsgd {

// A node's key (docs/design.md, "Security"): what a worker of node `node_name` shows at Join
// when the coordinator binds node names to keys, made from a secret only the coordinator and
// the operator hold (--node_key_secret_file), so that the run token alone no longer admits a
// Join in any node's name. The HMAC-SHA256 of the node's name under `secret`, as 64 hex digits
// (`localsgdctl node_key --node=NAME` prints it).
std::string NodeKey(absl::string_view secret, absl::string_view node_name);

// Whether `key` is node `node_name`'s under `secret`, in a time that does not depend on where
// they differ.
bool IsNodeKey(absl::string_view secret, absl::string_view node_name, absl::string_view key);

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_NODE_KEY_H_
