// The one ISA level: cpu_features() is the detected features capped by KILN_ISA / set_max_isa, and
// a level that is unknown, unavailable or set too late is an error, not a silent fallback.
#include "core/cpu_features.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "ir/graph.h"
#include "kernels/cpu/gemm/microkernel.h"
#include "kiln/session.h"

namespace kiln {
namespace {

// Sets KILN_ISA for one scope and puts the old value back.
class ScopedIsaEnv {
 public:
  explicit ScopedIsaEnv(const char* value) {
    if (const char* old = std::getenv("KILN_ISA")) old_ = old, had_ = true;
    ::setenv("KILN_ISA", value, 1);
  }
  ~ScopedIsaEnv() { had_ ? (void)::setenv("KILN_ISA", old_.c_str(), 1) : (void)::unsetenv("KILN_ISA"); }

 private:
  std::string old_;
  bool had_ = false;
};

TEST(IsaLevel, NamesRoundTrip) {
  for (IsaLevel l : kIsaLevels) EXPECT_EQ(parse_isa(isa_name(l)), l);
  EXPECT_FALSE(parse_isa("sse4"));
  EXPECT_FALSE(parse_isa("AVX2"));
  EXPECT_FALSE(parse_isa(""));
}

// Run by run_tests.sh at every level below the CPU's: the features kernels see are the cap's.
TEST(IsaLevel, FeaturesFollowKilnIsa) {
  const CpuFeatures& detected = detected_cpu_features();
  IsaLevel want = detected.level();
  if (const char* env = std::getenv("KILN_ISA"))
    if (const auto l = parse_isa(env); l && *l < want && detected.has_level(*l)) want = *l;
  const CpuFeatures& f = cpu_features();
  EXPECT_EQ(f.level(), want) << "detected " << detected.to_string();
  EXPECT_EQ(f.avx2, detected.avx2);
  EXPECT_EQ(f.model, detected.model);
  if (want < IsaLevel::kAvx512) {
    EXPECT_FALSE(f.avx512f || f.avx512bw || f.avx512vl || f.avx512dq || f.avx512_bf16);
    EXPECT_STREQ(gemm::best_f32_kernel()->name, "f32_gemm_6x16_avx2");
  }
  if (want < IsaLevel::kAvx512Vnni) {
    EXPECT_FALSE(f.avx512_vnni);
  }
  if (want < IsaLevel::kAvxVnni) {
    EXPECT_FALSE(f.avx_vnni);
    EXPECT_FALSE(has_vnni());
  }
  for (IsaLevel l : kIsaLevels) EXPECT_EQ(f.has_level(l), l <= want && detected.has_level(l)) << isa_name(l);
}

TEST(IsaLevel, SetMaxIsaAfterKernelsChoseIsRefusedUnlessUnchanged) {
  const IsaLevel now = cpu_features().level();  // fixes the level, if nothing had yet
  EXPECT_EQ(set_max_isa(now), "");
  if (now > IsaLevel::kAvx2) {
    const std::string e = set_max_isa(IsaLevel::kAvx2);
    EXPECT_NE(e.find("cannot change"), std::string::npos) << e;
    EXPECT_EQ(cpu_features().level(), now);
  }
  for (IsaLevel l : kIsaLevels) {
    if (!detected_cpu_features().has_level(l)) {
      EXPECT_NE(set_max_isa(l).find("not available on this CPU"), std::string::npos);
    }
  }
}

// In a fresh process (the death-test child re-executes the binary): a cap set before the first
// cpu_features() call is what every kernel table then sees.
TEST(IsaLevelDeathTest, SetMaxIsaBeforeFirstUseCaps) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const bool ok = set_max_isa(IsaLevel::kAvx2).empty() && cpu_features().level() == IsaLevel::kAvx2 &&
                        !cpu_features().has_avx512() &&
                        std::string(gemm::best_f32_kernel()->name) == "f32_gemm_6x16_avx2";
        std::exit(ok ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
}

TEST(IsaLevel, BadKilnIsaIsAnErrorOfSessionCreation) {
  auto m = std::make_shared<ir::Model>();
  m->opsets[""] = 17;
  m->graph.inputs = {{"x", ir::TypeInfo::tensor(DType::kFloat32, {3}), ""}};
  m->graph.outputs = {{"y", ir::TypeInfo::tensor(DType::kFloat32, {3}), ""}};
  ir::Node neg;
  neg.op_type = "Neg";
  neg.inputs = {"x"};
  neg.outputs = {"y"};
  m->graph.nodes.push_back(neg);
  {
    ScopedIsaEnv env("avx1024");
    EXPECT_NE(isa_env_error().find("'avx1024' is not an ISA level"), std::string::npos);
    auto s = Session::create(m);
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.status().message().find("KILN_ISA='avx1024'"), std::string::npos) << s.status().message();
  }
  for (IsaLevel l : kIsaLevels) {
    ScopedIsaEnv env(isa_name(l));
    const bool available = detected_cpu_features().has_level(l);
    EXPECT_EQ(isa_env_error().empty(), available) << isa_name(l) << ": " << isa_env_error();
    EXPECT_EQ(Session::create(m).is_ok(), available) << isa_name(l);
  }
  EXPECT_TRUE(Session::create(m).is_ok());
}

}  // namespace
}  // namespace kiln
