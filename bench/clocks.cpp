// bench/clocks.cpp: clock and power sampling for `mxmoe bench --clocks` (see clocks.h).
#include "clocks.h"

#include <dlfcn.h>

#include <cstdio>
#include <stdexcept>
#include <utility>

#include "spread.h"

namespace mxmoe::bench {

std::string describe_reasons(uint64_t mask) {
  if (mask == 0) return "none";
  static const std::pair<uint64_t, const char*> kNames[] = {{kReasonIdle, "idle"},
                                                            {kReasonAppClocks, "app_clocks"},
                                                            {kReasonSwPowerCap, "power_cap"},
                                                            {kReasonHwSlowdown, "hw_slowdown"},
                                                            {kReasonSyncBoost, "sync_boost"},
                                                            {kReasonSwThermal, "sw_thermal"},
                                                            {kReasonHwThermal, "hw_thermal"},
                                                            {kReasonPowerBrake, "power_brake"},
                                                            {kReasonDisplay, "display"}};
  std::string out;
  uint64_t known = 0;
  for (const auto& [bit, name] : kNames) {
    known |= bit;
    if (mask & bit) out += (out.empty() ? "" : "+") + std::string(name);
  }
  if (const uint64_t rest = mask & ~known) {
    char b[24];
    std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(rest));
    out += (out.empty() ? "" : "+") + std::string(b);
  }
  return out;
}

ClockStats summarize(const std::vector<ClockSample>& samples, double window_s) {
  ClockStats s;
  if (samples.empty()) return s;
  s.window_s = window_s;
  std::vector<double> mhz, watts;
  double instant_sum = 0;
  int instant = 0, limited = 0;
  for (const ClockSample& c : samples) {
    mhz.push_back(c.sm_mhz);
    if (c.power_w >= 0) {
      watts.push_back(c.power_w);
      if (c.power_instant) instant_sum += c.power_w, ++instant;
    }
    limited += (c.reasons & kReasonsLimiting) != 0;
    s.reasons_seen |= c.reasons;
  }
  if (instant >= 2 && window_s >= kMinPowerWindowS) s.power_w_window = instant_sum / instant;
  s.samples = static_cast<int>(samples.size());
  const Spread sm = spread_of(std::move(mhz));
  s.sm_mhz_median = sm.median;
  s.sm_mhz_min = sm.min;
  s.sm_mhz_max = sm.max;
  if (!watts.empty()) s.power_w_median = spread_of(std::move(watts)).median;
  s.limited_frac = static_cast<double>(limited) / s.samples;
  return s;
}

std::string describe(const ClockStats& s) {
  if (s.samples == 0) return "-";
  char b[160];
  if (s.sm_mhz_min == s.sm_mhz_max)
    std::snprintf(b, sizeof b, "%.0f MHz", s.sm_mhz_median);
  else
    std::snprintf(b, sizeof b, "%.0f..%.0f MHz (med %.0f)", s.sm_mhz_min, s.sm_mhz_max,
                  s.sm_mhz_median);
  std::string out = b;
  if (s.power_w_window >= 0) {
    std::snprintf(b, sizeof b, ", %.0f W", s.power_w_window);
    out += b;
  } else if (s.power_w_median >= 0 && s.window_s >= kMinPowerWindowS) {
    std::snprintf(b, sizeof b, ", %.0f W avg", s.power_w_median);
    out += b;
  }
  if (const uint64_t lim = s.reasons_seen & kReasonsLimiting) {
    std::snprintf(b, sizeof b, ", %s %.0f%%", describe_reasons(lim).c_str(),
                  100.0 * s.limited_frac);
    out += b;
  }
  return out;
}

ClockMonitor::ClockMonitor(SampleFn fn, std::chrono::microseconds period)
    : fn_(std::move(fn)), period_(period) {}

ClockMonitor::~ClockMonitor() {
  if (thread_.joinable()) {
    stop_ = true;
    thread_.join();
  }
}

void ClockMonitor::start() {
  if (thread_.joinable()) throw std::logic_error("ClockMonitor::start: already running");
  {
    std::lock_guard<std::mutex> lock(mu_);
    samples_.clear();
  }
  stop_ = false;
  start_time_ = std::chrono::steady_clock::now();
  thread_ = std::thread([this] { loop(); });
}

ClockStats ClockMonitor::stop() {
  if (!thread_.joinable()) throw std::logic_error("ClockMonitor::stop: not running");
  stop_ = true;
  thread_.join();
  const std::chrono::duration<double> window = std::chrono::steady_clock::now() - start_time_;
  std::lock_guard<std::mutex> lock(mu_);
  return summarize(samples_, window.count());
}

void ClockMonitor::loop() {
  // Sample first, then check: a window shorter than one period still gets its sample.
  do {
    ClockSample c;
    if (fn_(&c)) {
      std::lock_guard<std::mutex> lock(mu_);
      samples_.push_back(c);
    }
    std::this_thread::sleep_for(period_);
  } while (!stop_);
}

// NVML's ABI, as published (nvml.h is not part of every toolkit install): status 0 is success,
// devices are opaque handles, clock type 1 is the SM clock, power is reported in milliwatts.
// Field values (nvmlDeviceGetFieldValues) come as nvmlFieldValue_t: the field id in, then the
// time, the call's status and a typed 8-byte value out.
namespace {
struct NvmlFieldValue {
  unsigned field_id;
  unsigned scope_id;
  long long timestamp_us;
  long long latency_us;
  int value_type;  // nvmlValueType_t: 0 double, 1 uint, 2 ulong, 3 ulonglong, 4 slonglong, 5 sint
  int status;
  union {
    double d;
    unsigned ui;
    unsigned long ul;
    unsigned long long ull;
    long long sll;
    int si;
  } value;
};
static_assert(sizeof(NvmlFieldValue) == 40, "nvmlFieldValue_t is 40 bytes");
constexpr unsigned kFieldPowerInstant = 186;  // NVML_FI_DEV_POWER_INSTANT, mW

// The value of a field as a double; false for a failed field or an unknown type.
bool field_as_double(const NvmlFieldValue& f, double* out) {
  if (f.status != 0) return false;
  switch (f.value_type) {
    case 0:
      *out = f.value.d;
      return true;
    case 1:
      *out = f.value.ui;
      return true;
    case 2:
      *out = static_cast<double>(f.value.ul);
      return true;
    case 3:
      *out = static_cast<double>(f.value.ull);
      return true;
    case 4:
      *out = static_cast<double>(f.value.sll);
      return true;
    case 5:
      *out = f.value.si;
      return true;
    default:
      return false;
  }
}
}  // namespace

struct NvmlClocks::Api {
  using Device = struct NvmlDeviceOpaque*;
  using Init = int (*)();
  using Shutdown = int (*)();
  using ErrorString = const char* (*)(int);
  using HandleByPci = int (*)(const char*, Device*);
  using ClockInfo = int (*)(Device, int, unsigned*);
  using PowerUsage = int (*)(Device, unsigned*);
  using Reasons = int (*)(Device, unsigned long long*);
  using FieldValues = int (*)(Device, int, NvmlFieldValue*);
  using PowerLimit = int (*)(Device, unsigned*);
  static constexpr int kClockSm = 1;

  void* lib = nullptr;
  bool inited = false;
  Shutdown shutdown = nullptr;
  ClockInfo clock_info = nullptr;
  PowerUsage power_usage = nullptr;    // optional
  Reasons reasons = nullptr;           // optional
  FieldValues field_values = nullptr;  // optional; null again once the power field fails
  PowerLimit power_limit = nullptr;    // optional
  Device dev = nullptr;

  ~Api() {
    if (inited && shutdown) shutdown();
    if (lib) dlclose(lib);
  }
};

NvmlClocks::NvmlClocks(std::unique_ptr<Api> api) : api_(std::move(api)) {}
NvmlClocks::~NvmlClocks() = default;

std::unique_ptr<NvmlClocks> NvmlClocks::open(const std::string& pci_bus_id, std::string* why_not) {
  auto fail = [&](const std::string& why) {
    if (why_not) *why_not = why;
    return std::unique_ptr<NvmlClocks>();
  };
  auto api = std::make_unique<Api>();
  api->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!api->lib) {
    const char* e = dlerror();
    return fail(std::string("cannot load libnvidia-ml.so.1 (") + (e ? e : "unknown") + ")");
  }
  auto sym = [&](const char* name) { return dlsym(api->lib, name); };
  const auto init = reinterpret_cast<Api::Init>(sym("nvmlInit_v2"));
  const auto err = reinterpret_cast<Api::ErrorString>(sym("nvmlErrorString"));
  const auto by_pci = reinterpret_cast<Api::HandleByPci>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
  api->shutdown = reinterpret_cast<Api::Shutdown>(sym("nvmlShutdown"));
  api->clock_info = reinterpret_cast<Api::ClockInfo>(sym("nvmlDeviceGetClockInfo"));
  api->power_usage = reinterpret_cast<Api::PowerUsage>(sym("nvmlDeviceGetPowerUsage"));
  api->reasons = reinterpret_cast<Api::Reasons>(sym("nvmlDeviceGetCurrentClocksEventReasons"));
  api->field_values = reinterpret_cast<Api::FieldValues>(sym("nvmlDeviceGetFieldValues"));
  api->power_limit = reinterpret_cast<Api::PowerLimit>(sym("nvmlDeviceGetEnforcedPowerLimit"));
  if (!api->reasons)  // drivers before the rename
    api->reasons = reinterpret_cast<Api::Reasons>(sym("nvmlDeviceGetCurrentClocksThrottleReasons"));
  if (!init || !by_pci || !api->shutdown || !api->clock_info)
    return fail(
        "libnvidia-ml.so.1 lacks nvmlInit_v2 / nvmlDeviceGetHandleByPciBusId_v2 / "
        "nvmlDeviceGetClockInfo");
  auto message = [&](int rc) {
    return err ? std::string(err(rc)) : "NVML status " + std::to_string(rc);
  };
  if (const int rc = init(); rc != 0) return fail("nvmlInit_v2: " + message(rc));
  api->inited = true;
  if (const int rc = by_pci(pci_bus_id.c_str(), &api->dev); rc != 0)
    return fail("nvmlDeviceGetHandleByPciBusId_v2(" + pci_bus_id + "): " + message(rc));
  unsigned mhz = 0;
  if (const int rc = api->clock_info(api->dev, Api::kClockSm, &mhz); rc != 0)
    return fail("nvmlDeviceGetClockInfo(SM): " + message(rc));
  return std::unique_ptr<NvmlClocks>(new NvmlClocks(std::move(api)));
}

bool NvmlClocks::sample(ClockSample* out) {
  unsigned mhz = 0;
  if (api_->clock_info(api_->dev, Api::kClockSm, &mhz) != 0) return false;
  out->sm_mhz = mhz;
  out->power_w = -1;
  out->power_instant = false;
  if (api_->field_values) {
    NvmlFieldValue f{};
    f.field_id = kFieldPowerInstant;
    double mw = 0;
    if (api_->field_values(api_->dev, 1, &f) == 0 && field_as_double(f, &mw) && mw >= 0) {
      out->power_w = mw * 1e-3;
      out->power_instant = true;
    } else {
      api_->field_values = nullptr;  // a driver without the field: ask once, not every 0.5 ms
    }
  }
  unsigned mw = 0;
  if (!out->power_instant && api_->power_usage && api_->power_usage(api_->dev, &mw) == 0)
    out->power_w = mw * 1e-3;
  unsigned long long r = 0;
  out->reasons = api_->reasons && api_->reasons(api_->dev, &r) == 0 ? r : 0;
  return true;
}

double NvmlClocks::power_limit_w() {
  unsigned mw = 0;
  return api_->power_limit && api_->power_limit(api_->dev, &mw) == 0 ? mw * 1e-3 : -1.0;
}

}  // namespace mxmoe::bench
