// The pjrt layer against the real CPU plugin: load, devices, copies, compile, execute, errors, cache.
#include <cstring>

#include "check.h"
#include "plugin_fixture.h"
#include "pjrt/compile_options.h"

using pjrt::ElementType;

namespace {

const char* kAddProgram = R"(module @add {
  func.func public @main(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> (tensor<2x3xf32>) {
    %0 = "stablehlo.add"(%a, %b) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    "func.return"(%0) : (tensor<2x3xf32>) -> ()
  }
})";

std::vector<float> read(const pjrt::Buffer& b) {
  std::vector<float> out(b.numel());
  b.to_host(out.data());
  return out;
}

}  // namespace

TEST(plugin_loads_and_reports_devices) {
  auto& c = test_client();
  CHECK(c.plugin().api_major() == 0);
  CHECK(c.plugin().api_minor() >= 57);
  CHECK(c.platform_name() == "cpu");
  CHECK(c.device_count() == 2);  // cpu_device_count option was honoured
  CHECK(!c.device(0).kind.empty());
  auto attrs = c.plugin().attributes();
  CHECK(attrs.count("stablehlo_current_version") == 1);
}

TEST(missing_plugin_is_a_clear_error) {
  CHECK_THROWS(pjrt::Error, pjrt::Plugin::load("/nonexistent/plugin.so"), "/nonexistent/plugin.so");
  auto choice = pjrt::choose_plugin("/nonexistent/plugin.so", {});
  CHECK(choice.path.empty());
  CHECK(choice.reason.find("/nonexistent/plugin.so") != std::string::npos);
  auto none = pjrt::choose_plugin("cpu", {"/nonexistent"});
  CHECK(none.reason.find("xla-cpu-pjrt") != std::string::npos);
}

TEST(host_round_trip_every_width) {
  auto& c = test_client();
  int64_t i64[3] = {-5, 1LL << 40, 7};
  auto b = c.from_host(i64, ElementType::kS64, {3}, 1);
  int64_t back[3] = {};
  b->to_host(back);
  CHECK(std::memcmp(i64, back, sizeof back) == 0);
  CHECK(b->device() == 1);
  uint8_t pred[4] = {0, 1, 1, 0};
  auto p = c.from_host(pred, ElementType::kPred, {2, 2}, 0);
  uint8_t pback[4] = {9, 9, 9, 9};
  p->to_host(pback);
  CHECK(std::memcmp(pred, pback, 4) == 0);
  auto moved = c.copy_to_device(*b, 0);
  int64_t back2[3] = {};
  moved->to_host(back2);
  CHECK(std::memcmp(i64, back2, sizeof back2) == 0);
}

TEST(compile_and_execute_add) {
  auto& c = test_client();
  auto exe = c.compile(kAddProgram, {{ElementType::kF32, {2, 3}}, {ElementType::kF32, {2, 3}}}, {{ElementType::kF32, {2, 3}}});
  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {10, 20, 30, 40, 50, 60};
  auto ba = c.from_host(a, ElementType::kF32, {2, 3}, 0);
  auto bb = c.from_host(b, ElementType::kF32, {2, 3}, 0);
  auto out = exe->execute(0, {ba.get(), bb.get()}, "test::add");
  CHECK(out.size() == 1);
  auto v = read(*out[0]);
  for (int i = 0; i < 6; ++i) CHECK(v[i] == a[i] + b[i]);
  CHECK(std::string(out[0]->producer()) == "test::add");
  // The same portable executable runs on the second device.
  auto ca = c.from_host(a, ElementType::kF32, {2, 3}, 1);
  auto cb = c.from_host(b, ElementType::kF32, {2, 3}, 1);
  auto out1 = exe->execute(1, {ca.get(), cb.get()}, "test::add");
  CHECK(read(*out1[0])[5] == 66.0f);
}

TEST(live_buffer_accounting) {
  auto& c = test_client();
  int64_t before = pjrt::Buffer::live_count(), bytes = pjrt::Buffer::live_bytes();
  {
    float x[4] = {};
    auto b = c.from_host(x, ElementType::kF32, {4}, 0);
    CHECK(pjrt::Buffer::live_count() == before + 1);
    CHECK(pjrt::Buffer::live_bytes() == bytes + 16);
  }
  CHECK(pjrt::Buffer::live_count() == before);
  CHECK(pjrt::Buffer::live_bytes() == bytes);
}

TEST(malformed_program_raises) {
  auto& c = test_client();
  CHECK_THROWS(pjrt::Error, c.compile("module { this is not mlir", {}, {}), "PJRT_Client_Compile");
}

TEST(wrong_argument_count_and_type_raise) {
  auto& c = test_client();
  auto exe = c.compile(kAddProgram, {{ElementType::kF32, {2, 3}}, {ElementType::kF32, {2, 3}}}, {{ElementType::kF32, {2, 3}}});
  float a[6] = {};
  auto ba = c.from_host(a, ElementType::kF32, {2, 3}, 0);
  CHECK_THROWS(pjrt::Error, exe->execute(0, {ba.get()}, "test::add"), "test::add");
  int32_t i[6] = {};
  auto bi = c.from_host(i, ElementType::kS32, {2, 3}, 0);
  CHECK_THROWS(pjrt::Error, exe->execute(0, {ba.get(), bi.get()}, "test::add"), "argument 1 is i32[2,3]");
}

TEST(serialize_round_trip) {
  auto& c = test_client();
  auto exe = c.compile(kAddProgram, {{ElementType::kF32, {2, 3}}, {ElementType::kF32, {2, 3}}}, {{ElementType::kF32, {2, 3}}});
  std::string bytes = exe->serialize();
  CHECK(!bytes.empty());
  auto again = c.deserialize(bytes, {{ElementType::kF32, {2, 3}}, {ElementType::kF32, {2, 3}}}, {{ElementType::kF32, {2, 3}}});
  float a[6] = {1, 1, 1, 1, 1, 1};
  auto ba = c.from_host(a, ElementType::kF32, {2, 3}, 0);
  auto out = again->execute(0, {ba.get(), ba.get()}, "test::add");
  CHECK(read(*out[0])[0] == 2.0f);
}

TEST(compile_options_encoding) {
  // {executable_build_options {device_ordinal: -1, num_replicas: 1, num_partitions: 1}, portable: true}
  std::string bytes = pjrt::encode_compile_options({});
  const unsigned char expected[] = {0x1A, 0x0F, 0x08, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
                                    0xFF, 0x01, 0x20, 0x01, 0x28, 0x01, 0x20, 0x01};
  CHECK(bytes.size() == sizeof expected);
  CHECK(std::memcmp(bytes.data(), expected, sizeof expected) == 0);
  // env_option_overrides (field 7): one map entry {1: "ab", 2: {2: false}}
  pjrt::CompileOptions o;
  o.overrides["ab"] = false;
  std::string with = pjrt::encode_compile_options(o);
  const unsigned char entry[] = {0x3A, 0x08, 0x0A, 0x02, 'a', 'b', 0x12, 0x02, 0x10, 0x00};
  CHECK(with.size() == sizeof expected + sizeof entry);
  CHECK(std::memcmp(with.data() + sizeof expected, entry, sizeof entry) == 0);
  CHECK(pjrt::default_compile_options().overrides.at("xla_allow_excess_precision") == false);
}
