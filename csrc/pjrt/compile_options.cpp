#include "pjrt/compile_options.h"

namespace pjrt {
namespace {

enum WireType { kVarint = 0, kLengthDelimited = 2 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_tag(std::string& out, int field, WireType wire) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | wire);
}

void put_int(std::string& out, int field, int64_t v) {
  put_tag(out, field, kVarint);
  put_varint(out, static_cast<uint64_t>(v));  // negative int64 takes ten bytes, as protobuf does
}

void put_message(std::string& out, int field, const std::string& body) {
  put_tag(out, field, kLengthDelimited);
  put_varint(out, body.size());
  out += body;
}

// CompileOptionsProto fields.
constexpr int kExecutableBuildOptions = 3;
constexpr int kCompilePortableExecutable = 4;
constexpr int kEnvOptionOverrides = 7;  // map<string, OptionOverrideProto>: entries {1: key, 2: value}
constexpr int kOverrideBool = 2;        // OptionOverrideProto.bool_field
// ExecutableBuildOptionsProto fields.
constexpr int kDeviceOrdinal = 1;
constexpr int kNumReplicas = 4;
constexpr int kNumPartitions = 5;
constexpr int kDeviceAssignment = 9;
// DeviceAssignmentProto fields.
constexpr int kReplicaCount = 1;
constexpr int kComputationCount = 2;
constexpr int kComputationDevices = 3;  // repeated {1: replica_device_ids (packed int64)}

}  // namespace

std::string encode_compile_options(const CompileOptions& options) {
  std::string build;
  put_int(build, kDeviceOrdinal, -1);
  const bool assigned = !options.replica_devices.empty();
  put_int(build, kNumReplicas, assigned ? static_cast<int64_t>(options.replica_devices.size()) : options.num_replicas);
  put_int(build, kNumPartitions, options.num_partitions);
  if (assigned) {
    std::string ids, computation, assignment;
    for (int64_t id : options.replica_devices) put_varint(ids, static_cast<uint64_t>(id));
    put_message(computation, 1, ids);
    put_int(assignment, kReplicaCount, static_cast<int64_t>(options.replica_devices.size()));
    put_int(assignment, kComputationCount, 1);
    put_message(assignment, kComputationDevices, computation);
    put_message(build, kDeviceAssignment, assignment);
  }
  std::string out;
  put_message(out, kExecutableBuildOptions, build);
  if (options.portable && !assigned) put_int(out, kCompilePortableExecutable, 1);
  for (const auto& [key, value] : options.overrides) {
    std::string entry, override_value;
    put_tag(entry, 1, kLengthDelimited);
    put_varint(entry, key.size());
    entry += key;
    put_int(override_value, kOverrideBool, value ? 1 : 0);
    put_message(entry, 2, override_value);
    put_message(out, kEnvOptionOverrides, entry);
  }
  return out;
}

CompileOptions default_compile_options() {
  CompileOptions options;
  options.overrides["xla_allow_excess_precision"] = false;
  return options;
}

}  // namespace pjrt
