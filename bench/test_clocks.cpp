// bench/test_clocks.cpp: CPU checks of the clock sampler (clocks.h; no GPU, no GoogleTest, as
// test_workload.cpp): the statistics of known samples, the reason names, the sampling thread on
// a fake source (it samples, stops, restarts, drops failed samples, refuses misuse, takes a
// window's mean power from instantaneous readings), and NVML
// opened for a bus id no GPU has: a reason, never an exception or a crash; with --fake-nvml, the
// NVML calls against fake_nvml.cpp. Prints every failure; exit 1 if any.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "clocks.h"
#include "test_check.h"

using namespace mxmoe::bench;

namespace {

void check_statistics() {
  CHECK(summarize({}).samples == 0 && describe(summarize({})) == "-", "empty window");
  // Four samples: clocks 1980, 1755, 1980, 1500; power reported by three; two power-capped.
  const std::vector<ClockSample> v = {{1980, 650, 0},
                                      {1755, 700, kReasonSwPowerCap},
                                      {1980, -1, kReasonSyncBoost},
                                      {1500, 690, kReasonSwPowerCap | kReasonHwThermal}};
  const ClockStats s = summarize(v, 1.5);
  CHECK(s.samples == 4 && s.window_s == 1.5, "%d samples over %g s", s.samples, s.window_s);
  CHECK(s.sm_mhz_median == 0.5 * (1755 + 1980), "median %g", s.sm_mhz_median);
  CHECK(s.sm_mhz_min == 1500 && s.sm_mhz_max == 1980, "range %g..%g", s.sm_mhz_min, s.sm_mhz_max);
  CHECK(s.power_w_median == 690, "power median %g over the reporting samples", s.power_w_median);
  CHECK(s.power_w_window < 0, "running averages gave a window power %g", s.power_w_window);
  CHECK(s.limited_frac == 0.5, "limited share %g (sync_boost is not a limit)", s.limited_frac);
  CHECK(s.reasons_seen == (kReasonSwPowerCap | kReasonSyncBoost | kReasonHwThermal), "union %llx",
        static_cast<unsigned long long>(s.reasons_seen));
  // A window of a second or more: the running average's median, marked as such.
  const std::string d = describe(s);
  CHECK(d == "1500..1980 MHz (med 1868), 690 W avg, power_cap+hw_thermal 50%", "describe: '%s'",
        d.c_str());
  // A shorter window: the running average mostly saw what ran before it, so no watts at all.
  const std::string short_d = describe(summarize(v, 0.2));
  CHECK(short_d == "1500..1980 MHz (med 1868), power_cap+hw_thermal 50%", "short window: '%s'",
        short_d.c_str());
  // Instantaneous readings: their mean is the window's power for a window of a second or more;
  // below, none.
  std::vector<ClockSample> inst = {{1980, 600, 0, true},
                                   {1980, 700, 0, true},
                                   {1980, -1, 0, true},
                                   {1980, 710, 0, true},
                                   {1980, 500, 0, false}};
  const ClockStats iw = summarize(inst, 1.2);
  CHECK(iw.power_w_window == 670, "mean of 600, 700, 710: %g W", iw.power_w_window);
  CHECK(describe(iw) == "1980 MHz, 670 W", "'%s'", describe(iw).c_str());
  CHECK(summarize(inst, 0.06).power_w_window < 0, "a 60 ms window gave a window power");
  CHECK(summarize({{1980, 640, 0, true}}, 2.0).power_w_window < 0, "one reading gave a mean");
  const ClockStats flat = summarize({{1755, -1, 0}, {1755, -1, kReasonIdle}});
  CHECK(flat.power_w_median < 0 && describe(flat) == "1755 MHz", "flat, no power: '%s'",
        describe(flat).c_str());
}

void check_reason_names() {
  CHECK(describe_reasons(0) == "none", "0: '%s'", describe_reasons(0).c_str());
  CHECK(describe_reasons(kReasonSwPowerCap) == "power_cap", "power cap");
  CHECK(describe_reasons(kReasonIdle | kReasonDisplay) == "idle+display", "'%s'",
        describe_reasons(kReasonIdle | kReasonDisplay).c_str());
  CHECK(describe_reasons(kReasonHwSlowdown | 0x10000) == "hw_slowdown+0x10000", "unknown bit: '%s'",
        describe_reasons(kReasonHwSlowdown | 0x10000).c_str());
  // Every limiting bit is named, none as hex.
  CHECK(describe_reasons(kReasonsLimiting).find("0x") == std::string::npos, "'%s'",
        describe_reasons(kReasonsLimiting).c_str());
}

bool throws_logic(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::logic_error&) {
    return true;
  }
  return false;
}

// A source that always reports the same SM clock.
SampleFn constant_clock(double mhz) {
  return [mhz](ClockSample* c) {
    c->sm_mhz = mhz;
    return true;
  };
}

void check_monitor() {
  std::atomic<int> calls{0};
  // Every third call fails (dropped); the clock walks down 1 MHz per call.
  ClockMonitor m(
      [&calls](ClockSample* c) {
        const int i = calls++;
        if (i % 3 == 2) return false;
        c->sm_mhz = 2000 - i;
        c->power_w = 500;
        return true;
      },
      std::chrono::microseconds(200));
  CHECK(throws_logic([&] { m.stop(); }), "stop before start accepted");
  m.start();
  CHECK(throws_logic([&] { m.start(); }), "start while running accepted");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const ClockStats a = m.stop();
  const int n = calls.load();
  CHECK(n >= 3, "only %d calls in 50 ms at a 0.2 ms period", n);
  CHECK(a.samples == n - n / 3, "%d samples kept of %d calls (every third dropped)", a.samples, n);
  CHECK(a.sm_mhz_max == 2000 && a.sm_mhz_min <= 2000 - (n - 2), "range %g..%g", a.sm_mhz_min,
        a.sm_mhz_max);
  CHECK(a.power_w_median == 500, "power %g", a.power_w_median);
  CHECK(a.power_w_window < 0, "running averages only, yet a window power %g", a.power_w_window);
  // A window shorter than the period still gets its one sample; a new window starts empty.
  ClockMonitor slow(constant_clock(1410), std::chrono::microseconds(50000));
  slow.start();
  const ClockStats b = slow.stop();
  CHECK(b.samples >= 1 && b.sm_mhz_median == 1410, "short window: %d samples", b.samples);
  m.start();
  const ClockStats c = m.stop();
  // Its first call may be one of the dropped ones, so it may hold no sample; never an old one.
  CHECK(calls.load() > n && (c.samples == 0 || c.sm_mhz_max <= 2000 - n),
        "second window: %d calls after %d, max %g", calls.load(), n, c.sm_mhz_max);
  // Destroyed while running: joins, no crash (the bench's unwinding path).
  {
    ClockMonitor running(constant_clock(1), std::chrono::microseconds(100));
    running.start();
  }
}

// The window's power through the monitor: instantaneous readings alternating 600 / 700 W give
// ~650 over a second; the same source over a 10 ms window, none.
ClockStats window_of(int ms) {
  std::atomic<int> calls{0};
  ClockMonitor m(
      [&calls](ClockSample* c) {
        c->sm_mhz = 1980;
        c->power_w = calls++ % 2 ? 700 : 600;
        c->power_instant = true;
        return true;
      },
      std::chrono::microseconds(500));
  m.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return m.stop();
}

void check_window_power() {
  const ClockStats w = window_of(1050);
  CHECK(w.window_s >= kMinPowerWindowS && w.window_s < 5, "window %g s", w.window_s);
  CHECK(std::fabs(w.power_w_window - 650) <= 50, "window power %g W, expected 600..700",
        w.power_w_window);
  const ClockStats s = window_of(10);
  CHECK(s.power_w_window < 0 && s.samples >= 1, "10 ms window: %g W, %d samples", s.power_w_window,
        s.samples);
}

void check_nvml_absent_or_refusing() {
  // No machine has a GPU at this bus id: whether or not the driver's NVML is installed, open()
  // must return null with a reason, not throw.
  std::string why;
  std::unique_ptr<NvmlClocks> n;
  bool threw = false;
  try {
    n = NvmlClocks::open("00ff:ff:1f.7", &why);
  } catch (...) {
    threw = true;
  }
  CHECK(!threw && !n && !why.empty(), "open of a missing device: %s", why.c_str());
  std::printf("NVML on this machine: %s\n", why.c_str());
  std::fflush(stdout);
}

// With --fake-nvml (CTest bench_clocks_fake_nvml: fake_nvml.cpp first on LD_LIBRARY_PATH): the
// fake's one device opens, samples its values through the real calls (SM clock type, the power
// field's mW -> W, the reasons under their newer name), and feeds a monitor.
void check_fake_nvml() {
  std::string why;
  std::unique_ptr<NvmlClocks> n = NvmlClocks::open("0000:42:00.0", &why);
  CHECK(n != nullptr, "the fake NVML's device did not open: %s", why.c_str());
  if (!n) return;
  ClockSample c;
  CHECK(n->sample(&c), "sample failed");
  CHECK(c.sm_mhz == 1755 && std::fabs(c.power_w - 655) < 1e-9 && c.power_instant &&
            c.reasons == kReasonSwPowerCap,
        "sample %g MHz %g W (instant %d) reasons %llx", c.sm_mhz, c.power_w, c.power_instant,
        static_cast<unsigned long long>(c.reasons));
  CHECK(n->power_limit_w() == 700, "power limit %g W", n->power_limit_w());
  NvmlClocks* src = n.get();
  ClockMonitor m([src](ClockSample* s) { return src->sample(s); }, std::chrono::microseconds(100));
  m.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(1050));
  const ClockStats st = m.stop();
  CHECK(st.samples >= 2 && describe(st) == "1755 MHz, 655 W, power_cap 100%", "'%s'",
        describe(st).c_str());
  // A second handle after the first is closed: init / shutdown pair up.
  n.reset();
  CHECK(NvmlClocks::open("0000:42:00.0", &why) != nullptr, "reopen: %s", why.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const bool fake = argc > 1 && std::string(argv[1]) == "--fake-nvml";
  check_statistics();
  check_reason_names();
  check_monitor();
  check_window_power();
  check_nvml_absent_or_refusing();
  if (fake) check_fake_nvml();
  return test::check_summary("bench clock sampler checks passed");
}
