#include "python/proto_to_python.h"

#include <google/protobuf/descriptor.h>

namespace localsgd {
namespace {

namespace pb = google::protobuf;
namespace py = pybind11;

py::object Value(const pb::Message& message, const pb::FieldDescriptor* field, int index) {
  const pb::Reflection* r = message.GetReflection();
  const bool repeated = index >= 0;
  switch (field->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT32:
      return py::int_(repeated ? r->GetRepeatedInt32(message, field, index)
                               : r->GetInt32(message, field));
    case pb::FieldDescriptor::CPPTYPE_INT64:
      return py::int_(repeated ? r->GetRepeatedInt64(message, field, index)
                               : r->GetInt64(message, field));
    case pb::FieldDescriptor::CPPTYPE_UINT32:
      return py::int_(repeated ? r->GetRepeatedUInt32(message, field, index)
                               : r->GetUInt32(message, field));
    case pb::FieldDescriptor::CPPTYPE_UINT64:
      return py::int_(repeated ? r->GetRepeatedUInt64(message, field, index)
                               : r->GetUInt64(message, field));
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
      return py::float_(repeated ? r->GetRepeatedDouble(message, field, index)
                                 : r->GetDouble(message, field));
    case pb::FieldDescriptor::CPPTYPE_FLOAT:
      return py::float_(repeated ? r->GetRepeatedFloat(message, field, index)
                                 : r->GetFloat(message, field));
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      return py::bool_(repeated ? r->GetRepeatedBool(message, field, index)
                                : r->GetBool(message, field));
    case pb::FieldDescriptor::CPPTYPE_ENUM:
      return py::str(
          (repeated ? r->GetRepeatedEnum(message, field, index) : r->GetEnum(message, field))
              ->name());
    case pb::FieldDescriptor::CPPTYPE_STRING:
      if (field->type() == pb::FieldDescriptor::TYPE_BYTES) {
        return py::bytes(repeated ? r->GetRepeatedString(message, field, index)
                                  : r->GetString(message, field));
      }
      return py::str(repeated ? r->GetRepeatedString(message, field, index)
                              : r->GetString(message, field));
    case pb::FieldDescriptor::CPPTYPE_MESSAGE:
      return ProtoToPython(repeated ? r->GetRepeatedMessage(message, field, index)
                                    : r->GetMessage(message, field));
  }
  return py::none();
}

}  // namespace

py::dict ProtoToPython(const pb::Message& message) {
  py::dict out;
  const pb::Descriptor* descriptor = message.GetDescriptor();
  const pb::Reflection* r = message.GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const pb::FieldDescriptor* field = descriptor->field(i);
    if (field->is_repeated()) {
      py::list items;
      for (int j = 0; j < r->FieldSize(message, field); ++j) items.append(Value(message, field, j));
      out[py::str(field->name())] = items;
    } else if (!field->has_presence() || r->HasField(message, field)) {
      out[py::str(field->name())] = Value(message, field, -1);
    }
  }
  return out;
}

}  // namespace localsgd
