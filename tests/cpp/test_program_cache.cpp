// The on-disk program cache against the real CPU plugin: corrupt and truncated entries are detected,
// deleted and recompiled; caches sharing a folder (as two processes would) reuse each other's entries;
// the folder stays under its size bound by evicting the least recently used entries.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "check.h"
#include "plugin_fixture.h"
#include "pjrt/program_cache.h"

using pjrt::ElementType;
using pjrt::TensorSpec;

namespace {

// A distinct small program per `k` (the constant differs), so each has its own entry.
std::string program(int k) {
  return "module @add {\n  func.func public @main(%a: tensor<4xf32>) -> (tensor<4xf32>) {\n"
         "    %c = \"stablehlo.constant\"() {value = dense<" + std::to_string(k) + ".0> : tensor<4xf32>} : () -> tensor<4xf32>\n"
         "    %0 = \"stablehlo.add\"(%a, %c) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n"
         "    \"func.return\"(%0) : (tensor<4xf32>) -> ()\n  }\n}";
}
const std::vector<TensorSpec> kIo = {{ElementType::kF32, {4}}};

std::string fresh_dir(const char* name) {
  std::string dir = "/tmp/torch_pjrt_cache_test_" + std::to_string(getpid()) + "_" + name;
  std::system(("rm -rf " + dir).c_str());
  return dir;
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 4 && n.substr(n.size() - 4) == ".bin") out.push_back(dir + "/" + n);
    }
    closedir(d);
  }
  return out;
}

float run(const pjrt::ExecutablePtr& exe) {
  float x[4] = {1, 1, 1, 1};
  auto b = test_client().from_host(x, ElementType::kF32, {4}, 0);
  auto out = exe->execute(0, {b.get()}, "test::cache");
  float y[4];
  out[0]->to_host(y);
  return y[0];
}

}  // namespace

TEST(disk_cache_shared_between_caches) {
  std::string dir = fresh_dir("shared");
  pjrt::ProgramCache writer(test_client(), dir);
  CHECK(run(writer.get(program(1), kIo, kIo)) == 2.0f);
  CHECK(writer.stats().compiles == 1);
  pjrt::ProgramCache reader(test_client(), dir);  // another process on the same folder
  CHECK(run(reader.get(program(1), kIo, kIo)) == 2.0f);
  CHECK(reader.stats().compiles == 0);
  CHECK(reader.stats().disk_hits == 1);
}

TEST(disk_cache_rejects_corrupt_and_truncated_entries) {
  std::string dir = fresh_dir("corrupt");
  {
    pjrt::ProgramCache c(test_client(), dir);
    c.get(program(2), kIo, kIo);
  }
  auto files = entries(pjrt::ProgramCache(test_client(), dir).dir());
  CHECK(files.size() == 1);
  // Flip one byte in the payload: the checksum catches it.
  {
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-10, std::ios::end);
    char ch;
    f.read(&ch, 1);
    f.seekp(-10, std::ios::end);
    ch = static_cast<char>(ch ^ 0x5a);
    f.write(&ch, 1);
  }
  {
    pjrt::ProgramCache c(test_client(), dir);
    CHECK(run(c.get(program(2), kIo, kIo)) == 3.0f);
    CHECK(c.stats().disk_corrupt == 1);
    CHECK(c.stats().compiles == 1);  // recompiled, and the entry rewritten
  }
  // Truncate it, as a writer killed without the rename protocol would leave it.
  struct stat st;
  stat(files[0].c_str(), &st);
  CHECK(truncate(files[0].c_str(), st.st_size / 2) == 0);
  {
    pjrt::ProgramCache c(test_client(), dir);
    CHECK(run(c.get(program(2), kIo, kIo)) == 3.0f);
    CHECK(c.stats().disk_corrupt == 1);
  }
  // Garbage with no header at all.
  { std::ofstream(files[0], std::ios::binary | std::ios::trunc) << "xx"; }
  {
    pjrt::ProgramCache c(test_client(), dir);
    CHECK(run(c.get(program(2), kIo, kIo)) == 3.0f);
    CHECK(c.stats().disk_corrupt == 1);
  }
  // After the rewrite, a clean hit.
  pjrt::ProgramCache c(test_client(), dir);
  c.get(program(2), kIo, kIo);
  CHECK(c.stats().disk_hits == 1);
  CHECK(c.stats().disk_corrupt == 0);
}

TEST(disk_cache_evicts_least_recently_used_past_its_bound) {
  std::string dir = fresh_dir("bound");
  int64_t one;
  {
    pjrt::ProgramCache probe(test_client(), dir, 0);
    probe.get(program(100), kIo, kIo);
    one = probe.disk_bytes();
  }
  CHECK(one > 0);
  std::system(("rm -rf " + dir).c_str());
  // Room for about four entries.
  pjrt::ProgramCache c(test_client(), dir, one * 4 + one / 2);
  for (int k = 0; k < 10; ++k) {
    c.get(program(k), kIo, kIo);
    usleep(2000);  // distinct modification times
  }
  CHECK(c.stats().disk_evictions > 0);
  CHECK(c.disk_bytes() <= one * 4 + one / 2);
  CHECK(entries(c.dir()).size() <= 4);
  // The newest entry survived and loads from disk in a new cache.
  pjrt::ProgramCache again(test_client(), dir, one * 4 + one / 2);
  CHECK(run(again.get(program(9), kIo, kIo)) == 10.0f);
  CHECK(again.stats().disk_hits == 1);
  std::system(("rm -rf " + dir).c_str());
}
