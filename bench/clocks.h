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
// between replays included: a short case's samples mostly see the flush). The sampled power is
// NVML's power reading, which Ampere and later GPUs (except GA100) average over the last second:
// for a window of a few hundred ms it mostly reports what ran before. So the window's own mean
// power comes from the board's energy counter, polled with the samples (EnergyStep below).
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
  double power_w = 0;    // < 0: not reported
  uint64_t reasons = 0;  // NVML clock-event reason bits (kReason* below)
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
  int samples = 0;  // 0: not measured (no NVML, or --clocks not given); the rest is then 0
  double sm_mhz_median = 0, sm_mhz_min = 0, sm_mhz_max = 0;
  double power_w_median = -1;  // < 0: no sample reported power
  double power_w_window = -1;  // mean power over the window (energy counter); < 0: not known
  double limited_frac = 0;     // share of samples with any kReasonsLimiting bit
  uint64_t reasons_seen = 0;   // union of every sample's bits
};

ClockStats summarize(const std::vector<ClockSample>& samples);

// "1755 MHz, 612 W" / "1410..1755 MHz (med 1620), 700 W, power_cap 80%" / "-" when not measured.
// The watts are the window's mean (power_w_window) where known, else the sampled readings'
// median marked as NVML's running average ("612 W avg").
std::string describe(const ClockStats& s);

using SampleFn = std::function<bool(ClockSample*)>;  // false: this sample is dropped
// The board's energy counter in millijoules (monotonic); false: not available.
using EnergyFn = std::function<bool(uint64_t*)>;

// The energy counter advances in steps, not continuously: on an H100 (driver 580, thirty-sixth
// session) the first windows of a run read the same value at their start and stop (0 W over a
// copy ceiling at full load), later ones ~705 W. So the monitor polls the counter with each
// sample and keeps the points where it changed: between two changes, energy and time are both
// known (time to the polling period), whatever the counter's cadence.
struct EnergyStep {
  double t_s = 0;   // seconds since the window started, when the change was seen
  uint64_t mj = 0;  // the counter's new value
};
// A window's mean power from its change points: (last - first) mJ over (last - first) s; < 0
// with fewer than two changes, a span under kMinEnergySpanS (too coarse against the polling) or
// a counter that went back.
constexpr double kMinEnergySpanS = 0.01;
double stepped_power_w(const std::vector<EnergyStep>& steps);

// Samples fn every period on its own thread between start() and stop(), and, with an energy
// source, the window's mean power (ClockStats::power_w_window). One window at a time; start()
// while running and stop() while not running are usage errors (std::logic_error).
class ClockMonitor {
 public:
  ClockMonitor(SampleFn fn, std::chrono::microseconds period, EnergyFn energy = nullptr);
  ~ClockMonitor();
  ClockMonitor(const ClockMonitor&) = delete;
  ClockMonitor& operator=(const ClockMonitor&) = delete;
  void start();
  // The source is called at least once per window, even one shorter than period.
  ClockStats stop();

 private:
  void loop();
  void poll_energy();  // records a change point when the counter moved (under mu_)
  SampleFn fn_;
  std::chrono::microseconds period_;
  EnergyFn energy_;
  bool energy_ok_ = false;
  uint64_t energy_last_mj_ = 0;
  std::vector<EnergyStep> steps_;
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
  bool sample(ClockSample* out);
  // The board's energy counter (nvmlDeviceGetTotalEnergyConsumption, mJ since the driver loaded).
  bool energy_mj(uint64_t* out);
  // The enforced board power limit in W (nvmlDeviceGetEnforcedPowerLimit); < 0: not reported.
  double power_limit_w();

 private:
  struct Api;
  explicit NvmlClocks(std::unique_ptr<Api> api);
  std::unique_ptr<Api> api_;
};

}  // namespace mxmoe::bench
