#ifndef LOCALSGD_PYTHON_PROTO_TO_PYTHON_H_
#define LOCALSGD_PYTHON_PROTO_TO_PYTHON_H_

#include <google/protobuf/message.h>
#include <pybind11/pybind11.h>

namespace localsgd {

// A message as Python values: a dict by proto field name with every singular field (optional
// and oneof members only when set), repeated fields as lists, enums by name, 64-bit integers as
// ints (not strings as in proto's JSON). Needs the GIL.
pybind11::dict ProtoToPython(const google::protobuf::Message& message);

}  // namespace localsgd

#endif  // LOCALSGD_PYTHON_PROTO_TO_PYTHON_H_
