// The window-set format (harness/core/window_set.h): what --dump writes, verify
// reads back and judges exactly as check did; a perturbed gradient fails
// with its parameter, window and element named; every class of bad input
// is refused with the file named.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "harness/core/config.h"
#include "harness/gate/gate.h"
#include "harness/core/npy.h"
#include "harness/core/suite.h"
#include "harness/core/window_set.h"
#include "kernels/cpu/cpu_backend.h"

namespace gradeq {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("gradeq_window_set_" + name);
  fs::remove_all(dir);
  return dir;
}

// A default scenario's window set, as `gradeq check --scenario S --dump DIR` writes it.
ScenarioResult dump(const std::string& scenario, const fs::path& dir) {
  ScenarioSpec spec = *find_scenario(default_scenarios(), scenario);
  const Scenario sc = materialize(spec);
  CpuBackend cpu;
  const Runs runs = execute(sc, cpu, correct_loop(), ErrorModel{});
  write_window_set(dir, sc, runs, 1);
  return judge(sc, runs);
}

nlohmann::json manifest(const fs::path& dir) {
  std::ifstream in(dir / "manifest.json");
  return nlohmann::json::parse(in);
}
void write_manifest(const fs::path& dir, const nlohmann::json& m) { std::ofstream(dir / "manifest.json") << m.dump(2); }

std::vector<double> load(const fs::path& file) { return read_npy(file).values; }
void store(const fs::path& file, const std::vector<long>& shape, const std::vector<double>& v) {
  const std::vector<float> f(v.begin(), v.end());
  write_npy(file, shape, std::span<const float>(f));
}

TEST(WindowSet, ScenarioConfigRoundTrips) {
  for (const ScenarioSpec& s : default_scenarios()) {
    const nlohmann::json j = scenario_to_json(s);
    const ScenarioSpec back = scenario_from_json(j, "test");
    EXPECT_EQ(describe_scenario(back), describe_scenario(s)) << s.name;
    EXPECT_EQ(scenario_to_json(back), j) << s.name;
  }
}

// Every default scenario: verify of its dump gives the verdicts check gave.
TEST(WindowSet, VerifyOfEveryDefaultScenarioDumpPasses) {
  for (const ScenarioSpec& s : default_scenarios()) {
    const fs::path dir = fresh_dir("roundtrip");
    const ScenarioResult checked = dump(s.name, dir);
    ASSERT_TRUE(checked.passed()) << s.name;
    const ScenarioResult verified = verify_window_set(read_window_set(dir), ErrorModel{});
    EXPECT_TRUE(verified.passed()) << s.name << ": " << verified.first_failure();
    for (const auto& [a, b] : {std::pair{&checked.math, &verified.math}, std::pair{&checked.kernel, &verified.kernel},
                               std::pair{&checked.accumulation, &verified.accumulation}}) {
      EXPECT_EQ(a->status, b->status) << s.name;
      EXPECT_EQ(a->worst_ratio, b->worst_ratio) << s.name << " " << verdict_name(a->kind);
    }
  }
}

// "tied_gradient": "summed_first" models autograd's order for the tied
// head's weight (the uses summed, then one add): the bound changes, the
// loop's own run still passes under it, and the same dump read without
// the key gives check's verdicts again.
TEST(WindowSet, TiedGradientDeclaresHowTheUsesAreAdded) {
  const fs::path dir = fresh_dir("tied");
  const ScenarioResult checked = dump("lm_small", dir);
  nlohmann::json m = manifest(dir);
  m["tied_gradient"] = "summed_first";
  write_manifest(dir, m);
  const WindowSet summed = read_window_set(dir);
  EXPECT_TRUE(summed.scenario.spec.procedure.sum_uses_first);
  const ScenarioResult verified = verify_window_set(summed, ErrorModel{});
  EXPECT_TRUE(verified.passed()) << verified.first_failure();
  EXPECT_NE(verified.math.worst_ratio, checked.math.worst_ratio);
  m["tied_gradient"] = "added_per_use";
  write_manifest(dir, m);
  EXPECT_EQ(verify_window_set(read_window_set(dir), ErrorModel{}).math.worst_ratio, checked.math.worst_ratio);
}

TEST(WindowSet, APerturbedGradientFailsWithItsParameterWindowAndElement) {
  const fs::path dir = fresh_dir("perturbed");
  dump("mlp_adamw_clip_warmup", dir);
  const nlohmann::json m = manifest(dir);
  const std::string file = m["runs"]["K_acc"]["windows"][1]["tensors"]["grad/layer0.weight"];
  std::vector<double> g = load(dir / file);
  const NpyArray a = read_npy(dir / file);
  const long cols = a.shape[1], at = 2 * cols + 3;  // element [2, 3]
  g[at] = static_cast<double>(static_cast<float>(g[at] * (1.0 + 1e-3)));
  store(dir / file, a.shape, g);
  const ScenarioResult r = verify_window_set(read_window_set(dir), ErrorModel{});
  EXPECT_FALSE(r.passed());
  const std::string why = r.first_failure();
  EXPECT_NE(why.find("grad/layer0.weight"), std::string::npos) << why;
  EXPECT_NE(why.find("window 1"), std::string::npos) << why;
  EXPECT_NE(why.find("element [2, 3]"), std::string::npos) << why;
}

TEST(WindowSet, WithoutTheFullBatchRunKernelCorrectnessJudgesTheAccumulatedRun) {
  const fs::path dir = fresh_dir("no_full");
  dump("token_ce_padded_uneven", dir);
  nlohmann::json m = manifest(dir);
  for (const nlohmann::json* run : {&m["runs"]["K_full"], &m["bounds"]["K_full"]})
    for (const auto& w : (*run)["windows"])
      for (const auto& [name, file] : w["tensors"].items()) fs::remove(dir / file.get<std::string>());
  m["runs"].erase("K_full");
  m["bounds"].erase("K_full");
  write_manifest(dir, m);
  const ScenarioResult r = verify_window_set(read_window_set(dir), ErrorModel{});
  EXPECT_TRUE(r.passed()) << r.first_failure();
  for (const TensorCheck& c : r.kernel.checks) EXPECT_TRUE(c.name.starts_with("acc: ")) << c.name;
  EXPECT_FALSE(r.kernel.checks.empty());
}

TEST(WindowSet, NonFiniteResultsFailTheVerdict) {
  const fs::path dir = fresh_dir("nan");
  dump("mlp_mse_equal", dir);
  const std::string file = manifest(dir)["runs"]["K_acc"]["windows"][0]["tensors"]["grad/layer0.bias"];
  const NpyArray a = read_npy(dir / file);
  std::vector<double> g = a.values;
  g[0] = std::nan("");
  store(dir / file, a.shape, g);
  const ScenarioResult r = verify_window_set(read_window_set(dir), ErrorModel{});
  EXPECT_FALSE(r.passed());
  EXPECT_NE(r.first_failure().find("non-finite"), std::string::npos) << r.first_failure();
}

// What a run fed is judged, not taken on trust: a sample fed twice (and so
// another never), or micro-batches other than the declared split, fail the
// accumulation verdict with the samples and micro-batches named, even where
// every tensor agrees (here the run itself fed correctly; only its record
// of what it fed is changed).
TEST(WindowSet, WhatTheRunFedIsJudged) {
  const fs::path dir = fresh_dir("fed");
  dump("mlp_mse_equal", dir);  // split [[8, 8, 8, 8]]
  nlohmann::json m = manifest(dir);
  nlohmann::json& fed = m["runs"]["K_acc"]["windows"][0]["fed"];
  ASSERT_EQ(fed.size(), 4u);
  fed[1][0] = 0;  // sample 0 fed in micro-batches 0 and 1, sample 8 never
  write_manifest(dir, m);
  ScenarioResult r = verify_window_set(read_window_set(dir), ErrorModel{});
  EXPECT_EQ(r.accumulation.status, Status::fail);
  ASSERT_EQ(r.accumulation.problems.size(), 1u);
  EXPECT_EQ(r.accumulation.problems[0],
            "window 0: sample 0 (micro-batches 0 and 1) fed more than once; sample 8 never fed");
  for (const TensorCheck& c : r.accumulation.checks) EXPECT_TRUE(c.passed()) << c.name;

  fed[1][0] = 8;
  fed[1].push_back(fed[0].back());  // the last sample of micro-batch 0 fed in micro-batch 1 instead
  fed[0].erase(fed[0].size() - 1);
  write_manifest(dir, m);
  r = verify_window_set(read_window_set(dir), ErrorModel{});
  ASSERT_EQ(r.accumulation.problems.size(), 1u);
  EXPECT_EQ(r.accumulation.problems[0],
            "window 0: fed in micro-batches of [7,9,8,8] samples, where the declared split is [8,8,8,8]");
  EXPECT_FALSE(r.passed());
}

// Each class of bad input: a WindowSetError whose message names the file
// and says what is wrong.
struct BadCase {
  const char* what;
  std::function<void(const fs::path&, nlohmann::json&)> spoil;  // edits the files and/or the manifest
  const char* expect;                                           // in the message
};

TEST(WindowSet, BadInputIsRefusedWithTheFileNamed) {
  const auto k_acc_file = [](const nlohmann::json& m, const char* tensor) {
    return m["runs"]["K_acc"]["windows"][0]["tensors"][tensor].get<std::string>();
  };
  const std::vector<BadCase> cases = {
      {"missing manifest", [](const fs::path& d, nlohmann::json&) { fs::remove(d / "manifest.json"); }, "manifest.json"},
      {"manifest not JSON", [](const fs::path& d, nlohmann::json&) { std::ofstream(d / "manifest.json") << "{ nope"; },
       "is not JSON"},
      {"unknown schema version", [](const fs::path&, nlohmann::json& m) { m["schema_version"] = 99; }, "schema_version 99"},
      {"wrong format", [](const fs::path&, nlohmann::json& m) { m["format"] = "something"; }, "format"},
      {"unknown manifest key", [](const fs::path&, nlohmann::json& m) { m["extra"] = 1; }, "unknown key 'extra'"},
      {"tied_gradient neither way",
       [](const fs::path&, nlohmann::json& m) { m["tied_gradient"] = "sometimes"; }, "tied_gradient is \"summed_first\""},
      {"missing file",
       [&](const fs::path& d, nlohmann::json& m) { fs::remove(d / k_acc_file(m, "grad/layer0.weight")); }, "is missing"},
      {"extra file", [](const fs::path& d, nlohmann::json&) { fs::copy_file(d / "window0_inputs.npy", d / "stray.npy"); },
       "stray.npy: is not named"},
      {"misshapen file",
       [&](const fs::path& d, nlohmann::json& m) {
         store(d / k_acc_file(m, "grad/layer0.weight"), {2, 2}, {1, 2, 3, 4});
       },
       "has shape (2, 2), expected"},
      {"truncated file",
       [&](const fs::path& d, nlohmann::json& m) {
         const fs::path f = d / k_acc_file(m, "param/layer0.weight");
         fs::resize_file(f, fs::file_size(f) - 4);
       },
       "bytes of data"},
      {"not a .npy file",
       [&](const fs::path& d, nlohmann::json& m) { std::ofstream(d / k_acc_file(m, "param/layer0.bias")) << "hello"; },
       "is not a .npy file"},
      {"float64 values in a float32 tensor",
       [&](const fs::path& d, nlohmann::json& m) {
         const fs::path f = d / k_acc_file(m, "param/layer0.bias");
         NpyArray a = read_npy(f);
         a.values[0] += 1e-12;
         write_npy(f, a.shape, std::span<const double>(a.values));
       },
       "is not a float32 number"},
      {"integer gradients",
       [&](const fs::path& d, nlohmann::json& m) {
         const fs::path f = d / k_acc_file(m, "grad/layer0.bias");
         NpyArray a = read_npy(f);
         std::vector<std::int32_t> v(a.values.size(), 0);
         write_npy(f, a.shape, std::span<const std::int32_t>(v));
       },
       "is int32; float32 or float64 expected"},
      {"a tensor the scenario does not record",
       [](const fs::path&, nlohmann::json& m) {
         m["runs"]["K_acc"]["windows"][0]["tensors"]["grad/layer9.weight"] = "window0_inputs.npy";
       },
       "is not recorded by this scenario"},
      {"a gradient of a skipped window",
       [](const fs::path&, nlohmann::json& m) { m["runs"]["K_acc"]["windows"][0]["skipped"] = true; },
       "is skipped but has 'grad/layer0.weight'"},
      {"no record of what was fed",
       [](const fs::path&, nlohmann::json& m) { m["runs"]["K_acc"]["windows"][0].erase("fed"); }, ".fed: is missing"},
      {"a fed index past the window",
       [](const fs::path&, nlohmann::json& m) { m["runs"]["K_acc"]["windows"][0]["fed"][0][0] = 16; },
       "index 16 is not a sample of the window (0 to 15"},
      {"a missing gradient that is not a parameter",
       [](const fs::path&, nlohmann::json& m) {
         m["runs"]["K_acc"]["windows"][0]["missing_gradients"] = {"layer7.weight"};
       },
       "'layer7.weight' is not a trained parameter"},
      {"a missing gradient that is there",
       [](const fs::path&, nlohmann::json& m) {
         m["runs"]["K_acc"]["windows"][0]["missing_gradients"] = {"layer0.weight"};
       },
       "lists grad/layer0.weight as missing but has it"},
      {"an unknown key of a run's window",
       [](const fs::path&, nlohmann::json& m) { m["runs"]["K_acc"]["windows"][0]["lr"] = 0.1; }, "unknown key 'lr'"},
      {"a version 2 set (gradients after the clip)", [](const fs::path&, nlohmann::json& m) { m["schema_version"] = 2; },
       "version 2 recorded the gradient after the clip"},
      {"model contradicts the scenario",
       [](const fs::path&, nlohmann::json& m) { m["model"]["layers"][0]["out_features"] = 99; },
       "\"model\" contradicts"},
      {"split contradicts the scenario",
       [](const fs::path&, nlohmann::json& m) { m["windows"][0]["split"] = {1, 1}; },
       "windows[0].split [1,1] contradicts the scenario's split of the window [4,4,4,4]"},
      {"bad scenario key", [](const fs::path&, nlohmann::json& m) { m["scenario"]["learning_rat"] = 0.1; },
       "unknown key 'learning_rat'"},
      {"no accumulated run", [](const fs::path&, nlohmann::json& m) { m["runs"].erase("K_acc"); }, "K_acc"},
      {"wrong number of windows",
       [](const fs::path&, nlohmann::json& m) { m["runs"]["K_acc"]["windows"].erase(1); }, "windows, the scenario's split has"},
      {"a file outside the directory",
       [](const fs::path&, nlohmann::json& m) { m["windows"][0]["inputs"] = "../etc/passwd"; }, "is not a file name"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.what);
    const fs::path dir = fresh_dir("bad");
    dump("partial_last_window", dir);  // mse, two windows
    nlohmann::json m = manifest(dir);
    c.spoil(dir, m);
    if (fs::exists(dir / "manifest.json") && std::string(c.what) != "manifest not JSON") write_manifest(dir, m);
    try {
      read_window_set(dir);
      ADD_FAILURE() << "accepted";
    } catch (const WindowSetError& e) {
      EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace gradeq

namespace gradeq {
namespace {

// A window set cut from the middle of a run: its one window starts from
// the state K_acc reached after window 0 (weights, Adam's moments, the
// step count), given as the initial state. Verify judges it exactly as it
// judged window 1 of the whole run.
TEST(WindowSet, AWindowFromTheMiddleOfARunStartsFromItsInitialState) {
  const fs::path whole = fresh_dir("whole"), cut = fresh_dir("cut");
  dump("mlp_adamw_clip_warmup", whole);
  const ScenarioResult all = verify_window_set(read_window_set(whole), ErrorModel{});
  ASSERT_TRUE(all.passed()) << all.first_failure();

  nlohmann::json m = manifest(whole);
  fs::create_directories(cut);
  const auto copy = [&](const std::string& file) {
    fs::copy_file(whole / file, cut / file);
    return file;
  };
  nlohmann::json out = m;
  out.erase("bounds");
  out.erase("model");
  out["scenario"]["split"] = {m["scenario"]["split"][1]};
  out["windows"] = {m["windows"][1]};
  copy(m["windows"][1]["inputs"]);
  copy(m["windows"][1]["targets"]);
  const nlohmann::json& after0 = m["runs"]["K_acc"]["windows"][0]["tensors"];
  out["initial"] = {{"parameters", nlohmann::json::object()}, {"state", nlohmann::json::object()}};
  for (const auto& [name, file] : after0.items()) {
    if (name.starts_with("param/")) out["initial"]["parameters"][name.substr(6)] = copy(file);
    if (name.starts_with("state/")) out["initial"]["state"][name] = copy(file);
  }
  out["runs"] = {{"K_acc", {{"windows", {m["runs"]["K_acc"]["windows"][1]}}}}};
  for (const auto& [name, file] : m["runs"]["K_acc"]["windows"][1]["tensors"].items()) copy(file);
  write_manifest(cut, out);

  const ScenarioResult one = verify_window_set(read_window_set(cut), ErrorModel{});
  EXPECT_TRUE(one.passed()) << one.first_failure();
  // Window 1 of the whole run, judged again as window 0 of the cut set.
  for (const auto& [a, b] : {std::pair{&all.kernel, &one.kernel}, std::pair{&all.accumulation, &one.accumulation}}) {
    double worst_in_window_1 = 0.0;
    for (const TensorCheck& c : a->checks)
      if (c.window == 1 && !c.name.starts_with("full: ")) worst_in_window_1 = std::max(worst_in_window_1, c.worst_ratio);
    EXPECT_EQ(worst_in_window_1, b->worst_ratio) << verdict_name(a->kind);
  }
  // The state is used: from a fresh optimizer instead, the step differs.
  out["initial"].erase("state");
  for (const auto& [name, file] : after0.items())
    if (name.starts_with("state/")) fs::remove(cut / file.get<std::string>());
  write_manifest(cut, out);
  EXPECT_FALSE(verify_window_set(read_window_set(cut), ErrorModel{}).passed());
}

}  // namespace
}  // namespace gradeq

namespace gradeq {
namespace {

// Whatever a manifest holds, reading it either succeeds or raises
// WindowSetError: each value of a dumped manifest (the first window's
// entries of each list) replaced by each JSON type in turn.
TEST(WindowSet, NoManifestValueMakesTheReaderFailOtherThanAsBadInput) {
  const fs::path dir = fresh_dir("types");
  dump("token_ce_padded_uneven", dir);
  const nlohmann::json original = manifest(dir);
  std::vector<nlohmann::json::json_pointer> paths;
  const auto walk = [&](const nlohmann::json& j, const nlohmann::json::json_pointer& at, const auto& self) -> void {
    paths.push_back(at);
    if (j.is_object())
      for (const auto& [k, v] : j.items()) self(v, at / k, self);
    if (j.is_array() && !j.empty()) self(j[0], at / 0, self);
  };
  walk(original, nlohmann::json::json_pointer(), walk);
  const std::vector<nlohmann::json> replacements = {nullptr, 7, -1.5, "x", nlohmann::json::array(),
                                                    nlohmann::json::object(), true};
  long refused = 0, accepted = 0;
  for (const auto& path : paths) {
    if (path.empty()) continue;
    for (const nlohmann::json& r : replacements) {
      nlohmann::json m = original;
      m[path] = r;
      write_manifest(dir, m);
      try {
        read_window_set(dir);
        ++accepted;
      } catch (const WindowSetError&) {
        ++refused;
      } catch (const std::exception& e) {
        ADD_FAILURE() << path.to_string() << " = " << r.dump() << ": " << e.what();
      }
    }
  }
  EXPECT_GT(refused, 100);
  RecordProperty("refused", static_cast<int>(refused));
  RecordProperty("accepted", static_cast<int>(accepted));
}

}  // namespace
}  // namespace gradeq
