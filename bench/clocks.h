// bench/clocks.h: what the GPU's clocks and power did while a case ran (`mxmoe bench --clocks`).
//
// Why: a board at its power cap lowers the SM clock, and the cap is reached sooner by some data
// than by other (multiplier toggles) and by long cases than by short ones. A percentage of the
// dense ceilings compares two rates that may have run at different clocks, and two backends may
// differ by their clocks rather than their instructions (bench/NOTES.md: the full layer at
// T=4096, where w4a8 beat w4a16). The median SM clock of each case, next to the ceilings' own,
// tells which.
//
// How: a host thread samples the SM clock (MHz), the board power (W) and the active clock-event
// ("throttle") reasons through NVML every `period` while the timed replays run (the L2 flushes
// between replays included: a short case's samples mostly see the flush). The power is NVML's
// instantaneous reading (field NVML_FI_DEV_POWER_INSTANT, refreshed by the board at ~50 Hz) where
// the driver has it; the window's power is the mean of those readings. The older reading
// (nvmlDeviceGetPowerUsage) is a running average over the last second on Ampere and later (except
// GA100): for a window of a few hundred ms it mostly reports what ran before, so it is shown
// ("W avg") only for windows of a second or more. The energy counter is no help either: on the
// H200 (driver 580, thirty-seventh session) it did not step twice within any window of a run,
// and it costs milliseconds per read (bench/NOTES.md).
// NVML is opened at run time (dlopen of the driver's libnvidia-ml.so.1), so that the CLI still
// starts where no driver is installed; the few entry points used are declared in clocks.cpp from
// NVML's published ABI.
// The sample source is a function, so the statistics and the sampling thread are tested on the
// CPU with a fake one (test_clocks.cpp).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace mxmoe::bench {

struct ClockSample {
  double sm_mhz = 0;
  double power_w = 0;          // < 0: not reported
  uint64_t reasons = 0;        // NVML clock-event reason bits (kReason* below)
  bool power_instant = false;  // power_w is instantaneous, not NVML's 1-s running average
};

// NVML's clock-event reason bits (nvmlClocksEventReason*, formerly *ThrottleReason*).
constexpr uint64_t kReasonIdle = 0x1, kReasonAppClocks = 0x2, kReasonSwPowerCap = 0x4,
                   kReasonHwSlowdown = 0x8, kReasonSyncBoost = 0x10, kReasonSwThermal = 0x20,
                   kReasonHwThermal = 0x40, kReasonPowerBrake = 0x80, kReasonDisplay = 0x100;
// The reasons that mean "slower than the clock the board could run at for this work".
constexpr uint64_t kReasonsLimiting =
    kReasonSwPowerCap | kReasonHwSlowdown | kReasonSwThermal | kReasonHwThermal | kReasonPowerBrake;

// Names of the set bits, '+'-joined in bit order ("power_cap+hw_thermal"); "none" for 0; an
// unknown bit prints as its hex value.
std::string describe_reasons(uint64_t mask);

struct ClockStats {
  int samples = 0;      // 0: not measured (no NVML, or --clocks not given); the rest is then 0
  double window_s = 0;  // the window's length
  double sm_mhz_median = 0, sm_mhz_min = 0, sm_mhz_max = 0;
  double power_w_median = -1;  // median of the readings of either kind; < 0: none reported
  double power_w_window = -1;  // mean of the instantaneous readings; < 0: not known (see below)
  double limited_frac = 0;     // share of samples with any kReasonsLimiting bit
  uint64_t reasons_seen = 0;   // union of every sample's bits
};

// Either kind of power reading describes a window only from a second on: on an H100
// (thirty-eighth session) 60-ms ceiling windows of 8192^3 GEMMs read a mean instantaneous power
// of 125 W at 1980 MHz (BF16) and 879 W (FP8, above the 700 W limit), so the instantaneous
// field's readings lag the load by more than such a window; and the running average spans the
// last second.
constexpr double kMinPowerWindowS = 1.0;
ClockStats summarize(const std::vector<ClockSample>& samples, double window_s = 0);

// "1755 MHz, 612 W" / "1410..1755 MHz (med 1620), 700 W, power_cap 80%" / "-" when not measured.
// The watts are the window's mean (power_w_window) where known, else, for a window of at least
// kMinPowerWindowS, the readings' median marked as NVML's running average ("612 W avg"), else
// none.
std::string describe(const ClockStats& s);

using SampleFn = std::function<bool(ClockSample*)>;  // false: this sample is dropped

// Samples fn every period on its own thread between start() and stop(). One window at a time;
// start() while running and stop() while not running are usage errors (std::logic_error).
class ClockMonitor {
 public:
  ClockMonitor(SampleFn fn, std::chrono::microseconds period);
  ~ClockMonitor();
  ClockMonitor(const ClockMonitor&) = delete;
  ClockMonitor& operator=(const ClockMonitor&) = delete;
  void start();
  // The source is called at least once per window, even one shorter than period.
  ClockStats stop();

 private:
  void loop();
  SampleFn fn_;
  std::chrono::microseconds period_;
  std::chrono::steady_clock::time_point start_time_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<ClockSample> samples_;
};

// The NVML source for one GPU, named by its PCI bus id (cudaDeviceGetPCIBusId's form,
// "0000:1b:00.0"). open() returns null and says why (no libnvidia-ml.so.1, init failed, no such
// device) instead of throwing: clocks are an extra, never a reason to stop a benchmark.
class NvmlClocks {
 public:
  static std::unique_ptr<NvmlClocks> open(const std::string& pci_bus_id, std::string* why_not);
  ~NvmlClocks();
  NvmlClocks(const NvmlClocks&) = delete;
  NvmlClocks& operator=(const NvmlClocks&) = delete;
  // Power: the instantaneous field where the driver answers it, else the running average.
  bool sample(ClockSample* out);
  // The enforced board power limit in W (nvmlDeviceGetEnforcedPowerLimit); < 0: not reported.
  double power_limit_w();

 private:
  struct Api;
  explicit NvmlClocks(std::unique_ptr<Api> api);
  std::unique_ptr<Api> api_;
};

}  // namespace mxmoe::bench
