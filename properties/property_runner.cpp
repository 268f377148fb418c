// property_runner.cpp — RapidCheck's checkProperty with gradeq's reporting.
#include "properties/property_runner.h"

#include <bit>
#include <chrono>
#include <cstdlib>
#include <unordered_map>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <rapidcheck/detail/Configuration.h>

#include "harness/core/config.h"
#include "properties/generators.h"

namespace gradeq {

std::string property_test_id(const Property& p) { return "Properties/" + p.name; }

std::vector<std::string> replayed_properties() {
  std::vector<std::string> out;
  if (std::getenv("RC_PARAMS") == nullptr) return out;
  const std::string prefix = "Properties/";
  for (const auto& [id, reproduce] : rc::detail::configuration().reproduce)
    out.push_back(id.starts_with(prefix) ? id.substr(prefix.size()) : id);
  return out;
}

double PropertyRun::discard_rate() const {
  const double discarded = static_cast<double>(discarded_vacuous + discarded_ill_conditioned);
  const double generated = static_cast<double>(cases) + discarded;
  return generated > 0.0 ? discarded / generated : 0.0;
}

namespace {

// Counts what happened to each generated case (shrink attempts excluded):
// the largest error/bound among cases that held, and discards by reason.
class CaseTally : public rc::detail::TestListener {
 public:
  explicit CaseTally(PropertyRun& out) : out_(out) {}
  double last_ratio = 0.0;
  std::string last_case;

  void onTestCaseFinished(const rc::detail::CaseDescription& d) override {
    using Type = rc::detail::CaseResult::Type;
    if (d.result.type == Type::Success && last_ratio >= out_.worst_ratio) {
      out_.worst_ratio = last_ratio;
      out_.worst_case = last_case;
    }
    if (d.result.type == Type::Discard)
      ++(d.result.description == "vacuous" ? out_.discarded_vacuous : out_.discarded_ill_conditioned);
  }
  void onShrinkTried(const rc::detail::CaseDescription&, bool) override {}
  void onTestFinished(const rc::detail::TestMetadata&, const rc::detail::TestResult&) override {}

 private:
  PropertyRun& out_;
};

}  // namespace

PropertyRun run_property(const Property& p, PropertyContext& ctx, const PropertyRunConfig& config) {
  using namespace rc::detail;
  const auto start = std::chrono::steady_clock::now();
  PropertyRun out;
  out.name = p.name;

  TestMetadata metadata;
  metadata.id = property_test_id(p);
  metadata.description = p.description;
  // RapidCheck's configuration (and its start-up message) only when the
  // user set RC_PARAMS; otherwise the gate's own seed and case count.
  TestParams params;
  std::unordered_map<std::string, Reproduce> reproduce;
  if (std::getenv("RC_PARAMS") != nullptr) {
    params = configuration().testParams;
    reproduce = configuration().reproduce;
  }
  if (config.seed != 0) params.seed = config.seed;
  if (config.cases > 0) params.maxSuccess = config.cases;
  params.disableShrinking = !config.shrink;

  CaseTally tally(out);
  const auto property = [&] {
    const ScenarioSpec spec = *p.generator;
    const Evidence e = p.check(spec, ctx);
    if (!e.holds) {
      out.counterexample_spec = spec;  // the last failing case tried is the shrunk one
      throw CaseResult(CaseResult::Type::Failure, e.message);
    }
    if (e.discard) throw CaseResult(CaseResult::Type::Discard, e.discard_reason);
    tally.last_ratio = e.worst_ratio;
    tally.last_case = describe_scenario(spec);
  };
  const TestResult result = checkProperty(toProperty(property), metadata, params, tally, reproduce);

  if (result.template is<SuccessResult>()) {
    out.passed = true;
    out.cases = result.template get<SuccessResult>().numSuccess;
    if (out.discard_rate() > config.max_discard_rate) {
      out.passed = false;
      out.message = fmt::format("{} of {} generated cases discarded ({} vacuous, {} ill-conditioned): {:.1f} %, above the "
                                "{:g} % a property may leave undecided",
                                out.discarded_vacuous + out.discarded_ill_conditioned,
                                out.cases + out.discarded_vacuous + out.discarded_ill_conditioned, out.discarded_vacuous,
                                out.discarded_ill_conditioned, 100.0 * out.discard_rate(), 100.0 * config.max_discard_rate);
    }
  } else if (result.template is<FailureResult>()) {
    const FailureResult& f = result.template get<FailureResult>();
    out.cases = f.numSuccess;
    out.message = f.description;
    std::ostringstream example;
    for (const auto& [type, value] : f.counterExample) example << value;
    out.counterexample = example.str();
    Configuration replay;
    replay.reproduce[metadata.id] = f.reproduce;
    out.reproduce = configToMinimalString(replay);
  } else if (result.template is<GaveUpResult>()) {
    const GaveUpResult& g = result.template get<GaveUpResult>();
    out.cases = g.numSuccess;
    out.message = "gave up: too many cases discarded as vacuous or ill-conditioned (" + g.description + ")";
  } else {
    out.message = "RapidCheck error: " + result.template get<Error>().description;
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

namespace {
std::uint64_t bits(double x) { return std::bit_cast<std::uint64_t>(x); }
double from_bits(const nlohmann::json& j) { return std::bit_cast<double>(j.get<std::uint64_t>()); }
}  // namespace

std::string encode_property_run(const PropertyRun& r) {
  nlohmann::json j = {{"name", r.name},
                      {"ran", r.ran},
                      {"passed", r.passed},
                      {"cases", r.cases},
                      {"counterexample", r.counterexample},
                      {"message", r.message},
                      {"reproduce", r.reproduce},
                      {"worst_ratio", bits(r.worst_ratio)},
                      {"worst_case", r.worst_case},
                      {"discarded_vacuous", r.discarded_vacuous},
                      {"discarded_ill_conditioned", r.discarded_ill_conditioned},
                      {"seconds", bits(r.seconds)}};
  if (r.counterexample_spec) j["counterexample_spec"] = scenario_to_json(*r.counterexample_spec);
  return j.dump();
}

PropertyRun decode_property_run(const std::string& line) {
  const nlohmann::json j = nlohmann::json::parse(line);
  PropertyRun r;
  r.name = j.at("name").get<std::string>();
  r.ran = j.at("ran").get<bool>();
  r.passed = j.at("passed").get<bool>();
  r.cases = j.at("cases").get<int>();
  r.counterexample = j.at("counterexample").get<std::string>();
  r.message = j.at("message").get<std::string>();
  r.reproduce = j.at("reproduce").get<std::string>();
  r.worst_ratio = from_bits(j.at("worst_ratio"));
  r.worst_case = j.at("worst_case").get<std::string>();
  r.discarded_vacuous = j.at("discarded_vacuous").get<long>();
  r.discarded_ill_conditioned = j.at("discarded_ill_conditioned").get<long>();
  r.seconds = from_bits(j.at("seconds"));
  if (j.contains("counterexample_spec"))
    r.counterexample_spec = scenario_from_json(j.at("counterexample_spec"), "a property worker's counterexample");
  return r;
}

}  // namespace gradeq
