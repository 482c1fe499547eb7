// bench/test_clocks.cpp: CPU checks of the clock sampler (clocks.h; no GPU, no GoogleTest, as
// test_workload.cpp): the statistics of known samples, the reason names, the sampling thread on
// a fake source (it samples, stops, restarts, drops failed samples, refuses misuse, takes a
// window's mean power from an energy counter), and NVML
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
  const ClockStats s = summarize(v);
  CHECK(s.samples == 4, "%d samples", s.samples);
  CHECK(s.sm_mhz_median == 0.5 * (1755 + 1980), "median %g", s.sm_mhz_median);
  CHECK(s.sm_mhz_min == 1500 && s.sm_mhz_max == 1980, "range %g..%g", s.sm_mhz_min, s.sm_mhz_max);
  CHECK(s.power_w_median == 690, "power median %g over the reporting samples", s.power_w_median);
  CHECK(s.limited_frac == 0.5, "limited share %g (sync_boost is not a limit)", s.limited_frac);
  CHECK(s.reasons_seen == (kReasonSwPowerCap | kReasonSyncBoost | kReasonHwThermal), "union %llx",
        static_cast<unsigned long long>(s.reasons_seen));
  const std::string d = describe(s);
  CHECK(d == "1500..1980 MHz (med 1868), 690 W avg, power_cap+hw_thermal 50%", "describe: '%s'",
        d.c_str());
  // The window's mean power (energy counter) wins over the sampled running average.
  ClockStats w = s;
  w.power_w_window = 655.4;
  CHECK(describe(w) == "1500..1980 MHz (med 1868), 655 W, power_cap+hw_thermal 50%", "'%s'",
        describe(w).c_str());
  // Power from the counter's change points: first to last, whatever came between.
  CHECK(stepped_power_w({{0.005, 1000}, {0.015, 7000}, {0.025, 13000}}) == 600,
        "12 J over 20 ms: %g W", stepped_power_w({{0.005, 1000}, {0.015, 7000}, {0.025, 13000}}));
  CHECK(stepped_power_w({}) < 0 && stepped_power_w({{0.01, 5000}}) < 0,
        "fewer than two changes gave a power");
  CHECK(stepped_power_w({{0.001, 1000}, {0.006, 4000}}) < 0, "a 5 ms span is below the grain");
  CHECK(stepped_power_w({{0.0, 2000}, {0.5, 1000}}) < 0, "a counter that went back");
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
  CHECK(a.power_w_window < 0, "no energy source, yet a window power %g", a.power_w_window);
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

// The window's mean power from an energy source, whose counter the monitor polls: exact for a
// counter that moves at every poll or in 20 ms steps; none for a window under the counter's
// grain, a counter that does not move or a failing source.
ClockStats window_of(const EnergyFn& energy, int ms) {
  ClockMonitor m(constant_clock(1980), std::chrono::microseconds(500), energy);
  m.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return m.stop();
}

void check_window_power() {
  // 1 J per ms of the steady clock (1 mJ per us): the window's mean is 1000 W.
  const auto t0 = std::chrono::steady_clock::now();
  auto us_since_t0 = [t0] {
    const std::chrono::duration<double, std::micro> us = std::chrono::steady_clock::now() - t0;
    return static_cast<uint64_t>(us.count());
  };
  const EnergyFn every_poll = [&](uint64_t* mj) {
    *mj = us_since_t0();
    return true;
  };
  const ClockStats ew = window_of(every_poll, 40);
  CHECK(std::fabs(ew.power_w_window - 1000) < 5, "window power %g W, expected ~1000",
        ew.power_w_window);
  const ClockStats es = window_of(every_poll, 0);  // too short: no window power, samples stay
  CHECK(es.power_w_window < 0 && es.samples >= 1, "short window: %g W, %d samples",
        es.power_w_window, es.samples);
  // The same 1000 W through a counter that advances only every 20 ms: a two-point reading of a
  // 70 ms window would be off by up to 2/7; the change points are exact to the poll.
  const ClockStats sw = window_of(
      [&](uint64_t* mj) {
        *mj = us_since_t0() / 20000 * 20000;
        return true;
      },
      70);
  CHECK(std::fabs(sw.power_w_window - 1000) < 60, "stepped counter: %g W, expected ~1000",
        sw.power_w_window);
  // A counter that does not move during the window (the H100's first windows): no power, not 0 W.
  const ClockStats st = window_of(
      [](uint64_t* mj) {
        *mj = 123456;
        return true;
      },
      30);
  CHECK(st.power_w_window < 0, "a stuck counter gave %g W", st.power_w_window);
  CHECK(window_of([](uint64_t*) { return false; }, 25).power_w_window < 0,
        "a failing energy source gave a window power");
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
// fake's one device opens, samples its values through the real calls (SM clock type, mW -> W,
// the reasons under their newer name), and feeds a monitor.
void check_fake_nvml() {
  std::string why;
  std::unique_ptr<NvmlClocks> n = NvmlClocks::open("0000:42:00.0", &why);
  CHECK(n != nullptr, "the fake NVML's device did not open: %s", why.c_str());
  if (!n) return;
  ClockSample c;
  CHECK(n->sample(&c), "sample failed");
  CHECK(c.sm_mhz == 1755 && std::fabs(c.power_w - 612.5) < 1e-9 && c.reasons == kReasonSwPowerCap,
        "sample %g MHz %g W reasons %llx", c.sm_mhz, c.power_w,
        static_cast<unsigned long long>(c.reasons));
  CHECK(n->power_limit_w() == 700, "power limit %g W", n->power_limit_w());
  uint64_t e0 = 0, e1 = 0;
  CHECK(n->energy_mj(&e0), "energy counter not read");
  NvmlClocks* src = n.get();
  ClockMonitor m([src](ClockSample* s) { return src->sample(s); }, std::chrono::microseconds(100),
                 [src](uint64_t* mj) { return src->energy_mj(mj); });
  m.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  const ClockStats st = m.stop();
  CHECK(n->energy_mj(&e1) && e1 >= e0 + 40 * 600, "energy %llu -> %llu mJ over > 40 ms at 600 W",
        static_cast<unsigned long long>(e0), static_cast<unsigned long long>(e1));
  CHECK(std::fabs(st.power_w_window - 600) < 3, "window power %g W, expected ~600",
        st.power_w_window);
  CHECK(st.samples >= 1 && describe(st) == "1755 MHz, 600 W, power_cap 100%", "'%s'",
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
