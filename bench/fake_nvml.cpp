// bench/fake_nvml.cpp: a stand-in libnvidia-ml.so.1 for test_clocks.cpp, so that NvmlClocks'
// dlopen, symbol lookup and calls are checked on machines without a driver. It knows one GPU, at
// bus id 0000:42:00.0, whose SM clock (clock type 1) is 1755 MHz, power reading 612.5 W, active
// clock-event reasons the software power cap (0x4), enforced power limit 700 W, and whose
// instantaneous power field (NVML_FI_DEV_POWER_INSTANT, 186) reads 655 W (unlike the running
// average, as on real boards). Status codes: 0 success, 2 invalid argument, 3 not supported,
// 6 not found (NVML's values). Only the entry points clocks.cpp uses are defined; the
// throttle-reason query exists under its newer name only.
#include <cstring>

extern "C" {

struct FakeDevice {
  int id;
};
static FakeDevice g_device = {42};
static int g_inits = 0;

int nvmlInit_v2(void) {
  ++g_inits;
  return 0;
}
int nvmlShutdown(void) { return g_inits-- > 0 ? 0 : 2; }
const char* nvmlErrorString(int rc) { return rc == 6 ? "Not Found" : "fake NVML error"; }

int nvmlDeviceGetHandleByPciBusId_v2(const char* bus, FakeDevice** dev) {
  if (g_inits <= 0 || !bus || !dev) return 2;
  if (std::strcmp(bus, "0000:42:00.0") != 0) return 6;
  *dev = &g_device;
  return 0;
}

int nvmlDeviceGetClockInfo(FakeDevice* dev, int type, unsigned* mhz) {
  if (dev != &g_device || type != 1 || !mhz) return 2;
  *mhz = 1755;
  return 0;
}

int nvmlDeviceGetPowerUsage(FakeDevice* dev, unsigned* mw) {
  if (dev != &g_device || !mw) return 2;
  *mw = 612500;
  return 0;
}

int nvmlDeviceGetCurrentClocksEventReasons(FakeDevice* dev, unsigned long long* r) {
  if (dev != &g_device || !r) return 2;
  *r = 0x4;
  return 0;
}

// nvmlFieldValue_t as published: id and scope in; timestamp, latency, value type, status, value
// out.
struct FakeFieldValue {
  unsigned field_id;
  unsigned scope_id;
  long long timestamp_us;
  long long latency_us;
  int value_type;
  int status;
  union {
    double d;
    unsigned ui;
    unsigned long long ull;
  } value;
};
static_assert(sizeof(FakeFieldValue) == 40, "nvmlFieldValue_t is 40 bytes");

int nvmlDeviceGetFieldValues(FakeDevice* dev, int count, FakeFieldValue* values) {
  if (dev != &g_device || count < 0 || (count > 0 && !values)) return 2;
  for (int i = 0; i < count; ++i) {
    FakeFieldValue& f = values[i];
    f.timestamp_us = 1;
    f.latency_us = 0;
    if (f.field_id == 186) {
      f.value_type = 1;  // unsigned int, mW
      f.value.ui = 655000;
      f.status = 0;
    } else {
      f.status = 3;
    }
  }
  return 0;
}

int nvmlDeviceGetEnforcedPowerLimit(FakeDevice* dev, unsigned* mw) {
  if (dev != &g_device || !mw) return 2;
  *mw = 700000;
  return 0;
}

}  // extern "C"
