// Our own declarations of the subset of the PJRT C ABI that torch-pjrt calls.
//
// Facts only (function indices, field order, enum values), written here from the research notes in
// shared/research/pjrt.md; the upstream header is deliberately not used. Layouts are those of API 0.81,
// which every later plugin accepts: args structs are append-only and plugins accept a struct_size that is
// greater or equal to their own. Functions appended after 0.81 must be gated on Api::struct_size.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pjrt::abi {

struct ExtensionBase {
  size_t struct_size;
  int type;
  ExtensionBase* next;
};

// Opaque handles owned by the plugin.
struct Error;
struct Client;
struct Device;
struct DeviceDescription;
struct Memory;
struct Buffer;
struct Event;
struct LoadedExecutable;
struct Executable;
struct SerializedExecutable;

enum BufferType : int {
  kInvalid = 0,
  kPred = 1,
  kS8 = 2,
  kS16 = 3,
  kS32 = 4,
  kS64 = 5,
  kU8 = 6,
  kU16 = 7,
  kU32 = 8,
  kU64 = 9,
  kF16 = 10,
  kF32 = 11,
  kF64 = 12,
  kBF16 = 13,
  kC64 = 14,
  kC128 = 15,
};

enum HostBufferSemantics : int {
  kImmutableOnlyDuringCall = 0,
  kImmutableUntilTransferCompletes = 1,
  kImmutableZeroCopy = 2,
};

enum NamedValueType : int { kString = 0, kInt64 = 1, kInt64List = 2, kFloat = 3, kBool = 4 };

// Every args struct starts with this header.
#define PJRT_ARGS_HEADER \
  size_t struct_size;    \
  ExtensionBase* extension_start

struct NamedValue {
  PJRT_ARGS_HEADER;
  const char* name;
  size_t name_size;
  NamedValueType type;
  union {
    const char* string_value;
    int64_t int64_value;
    const int64_t* int64_array_value;
    float float_value;
    bool bool_value;
  };
  size_t value_size;
};

struct ApiVersion {
  PJRT_ARGS_HEADER;
  int major_version;
  int minor_version;
};

// The function table: a header, then function pointers at 40 + 8 * index.
struct Api {
  PJRT_ARGS_HEADER;
  ApiVersion version;
};
inline constexpr size_t kApiFunctionsOffset = 40;

// Function indices in the table (stable since API 0.57).
enum Fn : int {
  kErrorDestroy = 0,
  kErrorMessage = 1,
  kErrorGetCode = 2,
  kPluginInitialize = 3,
  kPluginAttributes = 4,
  kEventDestroy = 5,
  kEventIsReady = 6,
  kEventError = 7,
  kEventAwait = 8,
  kEventOnReady = 9,
  kClientCreate = 10,
  kClientDestroy = 11,
  kClientPlatformName = 12,
  kClientPlatformVersion = 14,
  kClientAddressableDevices = 16,
  kClientCompile = 20,
  kClientBufferFromHostBuffer = 22,
  kDeviceDescriptionId = 23,
  kDeviceDescriptionKind = 26,
  kDeviceDescriptionDebugString = 27,
  kDeviceGetDescription = 29,
  kDeviceMemoryStats = 34,
  kExecutableDestroy = 40,
  kExecutableNumOutputs = 44,
  kExecutableGetCostAnalysis = 46,
  kExecutableSerialize = 49,
  kLoadedExecutableDestroy = 50,
  kLoadedExecutableGetExecutable = 51,
  kLoadedExecutableExecute = 55,
  kExecutableDeserializeAndLoad = 56,
  kBufferDestroy = 58,
  kBufferElementType = 59,
  kBufferDimensions = 60,
  kBufferOnDeviceSizeInBytes = 64,
  kBufferDelete = 67,
  kBufferCopyToDevice = 69,
  kBufferToHostBuffer = 70,
  kBufferReadyEvent = 72,
  // compile-only: a topology described by options, and a compile against it with no client
  kTopologyDescriptionCreate = 82,
  kTopologyDescriptionDestroy = 83,
  kTopologyDescriptionPlatformName = 84,
  kTopologyDescriptionPlatformVersion = 85,
  kCompile = 89,
};

// Extensions hang off Api::extension_start (ExtensionBase::type).
inline constexpr int kExtensionFfi = 5;

// The FFI extension: registers typed-FFI custom-call handlers (kernels::ffi::Handler) for a platform
// ("Host" for XLA:CPU). Its args struct has no extension_start.
struct FfiRegisterHandlerArgs {
  size_t struct_size;
  const char* target_name;
  size_t target_name_size;
  void* handler;
  const char* platform_name;
  size_t platform_name_size;
  uint32_t traits;
};
struct FfiExtension {
  ExtensionBase base;
  void* type_id_register;
  void* user_data_add;
  Error* (*register_handler)(FfiRegisterHandlerArgs*);
};

struct ErrorDestroyArgs {
  PJRT_ARGS_HEADER;
  Error* error;
};
struct ErrorMessageArgs {
  PJRT_ARGS_HEADER;
  const Error* error;
  const char* message;
  size_t message_size;
};
struct ErrorGetCodeArgs {
  PJRT_ARGS_HEADER;
  const Error* error;
  int code;
};
struct PluginInitializeArgs {
  PJRT_ARGS_HEADER;
};
struct PluginAttributesArgs {
  PJRT_ARGS_HEADER;
  const NamedValue* attributes;
  size_t num_attributes;
};
struct EventArgs {  // Event_Destroy, Event_Error, Event_Await
  PJRT_ARGS_HEADER;
  Event* event;
};
struct EventIsReadyArgs {
  PJRT_ARGS_HEADER;
  Event* event;
  bool is_ready;
};
using OnReadyCallback = void (*)(Error*, void*);
struct EventOnReadyArgs {
  PJRT_ARGS_HEADER;
  Event* event;
  OnReadyCallback callback;
  void* user_arg;
};
struct ClientCreateArgs {
  PJRT_ARGS_HEADER;
  const NamedValue* create_options;
  size_t num_options;
  void* kv_get_callback;
  void* kv_get_user_arg;
  void* kv_put_callback;
  void* kv_put_user_arg;
  Client* client;
  void* kv_try_get_callback;
  void* kv_try_get_user_arg;
};
struct ClientArgs {  // Client_Destroy
  PJRT_ARGS_HEADER;
  Client* client;
};
struct ClientStringArgs {  // Client_PlatformName, Client_PlatformVersion
  PJRT_ARGS_HEADER;
  Client* client;
  const char* value;
  size_t value_size;
};
struct ClientDevicesArgs {
  PJRT_ARGS_HEADER;
  Client* client;
  Device* const* devices;
  size_t num_devices;
};
struct Program {
  PJRT_ARGS_HEADER;
  const char* code;
  size_t code_size;
  const char* format;
  size_t format_size;
};
struct Topology;
struct TopologyDescriptionCreateArgs {
  PJRT_ARGS_HEADER;
  const char* topology_name;
  size_t topology_name_size;
  const NamedValue* create_options;
  size_t num_options;
  Topology* topology;
};
struct TopologyDescriptionArgs {  // TopologyDescription_Destroy
  PJRT_ARGS_HEADER;
  Topology* topology;
};
struct TopologyDescriptionStringArgs {  // TopologyDescription_PlatformName, _PlatformVersion
  PJRT_ARGS_HEADER;
  Topology* topology;
  const char* value;
  size_t value_size;
};
struct CompileArgs {  // PJRT_Compile: compile-only, client may be null
  PJRT_ARGS_HEADER;
  const Topology* topology;
  const Program* program;
  const char* compile_options;
  size_t compile_options_size;
  Client* client;
  Executable* executable;
};
struct ClientCompileArgs {
  PJRT_ARGS_HEADER;
  Client* client;
  const Program* program;
  const char* compile_options;
  size_t compile_options_size;
  LoadedExecutable* executable;
};
struct ClientBufferFromHostBufferArgs {
  PJRT_ARGS_HEADER;
  Client* client;
  const void* data;
  BufferType type;
  const int64_t* dims;
  size_t num_dims;
  const int64_t* byte_strides;
  size_t num_byte_strides;
  HostBufferSemantics host_buffer_semantics;
  Device* device;
  Memory* memory;
  void* device_layout;
  Event* done_with_host_buffer;
  Buffer* buffer;
};
struct DeviceGetDescriptionArgs {
  PJRT_ARGS_HEADER;
  Device* device;
  DeviceDescription* description;
};
struct DeviceDescriptionIdArgs {
  PJRT_ARGS_HEADER;
  DeviceDescription* description;
  int id;
};
struct DeviceDescriptionStringArgs {  // DeviceDescription_Kind, _DebugString
  PJRT_ARGS_HEADER;
  DeviceDescription* description;
  const char* value;
  size_t value_size;
};
struct DeviceMemoryStatsArgs {
  PJRT_ARGS_HEADER;
  Device* device;
  int64_t bytes_in_use;
  int64_t peak_bytes_in_use;
  bool peak_bytes_in_use_is_set;
  int64_t num_allocs;
  bool num_allocs_is_set;
  int64_t largest_alloc_size;
  bool largest_alloc_size_is_set;
  int64_t bytes_limit;
  bool bytes_limit_is_set;
  int64_t bytes_reserved;
  bool bytes_reserved_is_set;
  int64_t peak_bytes_reserved;
  bool peak_bytes_reserved_is_set;
  int64_t bytes_reservable_limit;
  bool bytes_reservable_limit_is_set;
  int64_t largest_free_block_bytes;
  bool largest_free_block_bytes_is_set;
  int64_t pool_bytes;
  bool pool_bytes_is_set;
  int64_t peak_pool_bytes;
  bool peak_pool_bytes_is_set;
};
struct ExecutableArgs {  // Executable_Destroy
  PJRT_ARGS_HEADER;
  Executable* executable;
};
struct ExecutableNumOutputsArgs {
  PJRT_ARGS_HEADER;
  Executable* executable;
  size_t num_outputs;
};
struct ExecutableGetCostAnalysisArgs {
  PJRT_ARGS_HEADER;
  Executable* executable;
  size_t num_properties;
  const NamedValue* properties;  // owned by the executable
};
struct ExecutableSerializeArgs {
  PJRT_ARGS_HEADER;
  const Executable* executable;
  const char* serialized_bytes;
  size_t serialized_bytes_size;
  SerializedExecutable* serialized_executable;
  void (*serialized_executable_deleter)(SerializedExecutable*);
};
struct ExecutableDeserializeAndLoadArgs {
  PJRT_ARGS_HEADER;
  Client* client;
  const char* serialized_executable;
  size_t serialized_executable_size;
  LoadedExecutable* loaded_executable;
  const char* overridden_serialized_compile_options;
  size_t overridden_serialized_compile_options_size;
};
struct LoadedExecutableArgs {  // LoadedExecutable_Destroy
  PJRT_ARGS_HEADER;
  LoadedExecutable* executable;
};
struct LoadedExecutableGetExecutableArgs {
  PJRT_ARGS_HEADER;
  LoadedExecutable* loaded_executable;
  Executable* executable;
};
struct ExecuteOptions {
  PJRT_ARGS_HEADER;
  void** send_callbacks;
  void** recv_callbacks;
  size_t num_send_ops;
  size_t num_recv_ops;
  int launch_id;
  const int64_t* non_donatable_input_indices;
  size_t num_non_donatable_input_indices;
  void* context;
  const char* call_location;
  size_t num_tasks;
  int* task_ids;
  int64_t* incarnation_ids;
  // Appended in 0.97; harmless (ignored) for older plugins since larger structs are accepted.
  void* multi_slice_config;
};
struct LoadedExecutableExecuteArgs {
  PJRT_ARGS_HEADER;
  LoadedExecutable* executable;
  ExecuteOptions* options;
  Buffer* const* const* argument_lists;
  size_t num_devices;
  size_t num_args;
  Buffer** const* output_lists;
  Event** device_complete_events;
  Device* execute_device;
};
struct BufferArgs {  // Buffer_Destroy, Buffer_Delete
  PJRT_ARGS_HEADER;
  Buffer* buffer;
};
struct BufferElementTypeArgs {
  PJRT_ARGS_HEADER;
  Buffer* buffer;
  BufferType type;
};
struct BufferDimensionsArgs {
  PJRT_ARGS_HEADER;
  Buffer* buffer;
  const int64_t* dims;
  size_t num_dims;
};
struct BufferSizeArgs {
  PJRT_ARGS_HEADER;
  Buffer* buffer;
  size_t size;
};
struct BufferCopyToDeviceArgs {
  PJRT_ARGS_HEADER;
  Buffer* buffer;
  Device* dst_device;
  Buffer* dst_buffer;
};
struct BufferToHostBufferArgs {
  PJRT_ARGS_HEADER;
  Buffer* src;
  void* host_layout;
  void* dst;
  size_t dst_size;
  Event* event;
};
struct BufferReadyEventArgs {
  PJRT_ARGS_HEADER;
  Buffer* buffer;
  Event* event;
};

#undef PJRT_ARGS_HEADER

}  // namespace pjrt::abi
