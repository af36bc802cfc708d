#include "diag/device_metrics.h"

#include <dlfcn.h>

#include "base/logging.h"

namespace choir::diag {
namespace {

// Opens the first library of `names` that loads; "" and the last error otherwise.
void* OpenFirst(const std::vector<std::string>& names, std::string* error) {
  for (const std::string& name : names) {
    if (void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
    const char* e = dlerror();
    *error = e != nullptr ? e : name + ": cannot open";
  }
  return nullptr;
}

template <typename Fn>
bool Resolve(void* handle, const char* symbol, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, symbol));
  return *fn != nullptr;
}

MetricFamily Family(const char* name, const char* type, const char* help) {
  return MetricFamily{name, type, help, {}};
}

}  // namespace

// NVML's C API (nvml.h): handles are opaque pointers, 0 is NVML_SUCCESS.
struct DeviceCollector::Nvml {
  struct Utilization {
    unsigned int gpu;
    unsigned int memory;
  };
  struct Memory {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
  };
  void* handle = nullptr;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*count)(unsigned int*) = nullptr;
  int (*by_index)(unsigned int, void**) = nullptr;
  int (*utilization)(void*, Utilization*) = nullptr;
  int (*memory)(void*, Memory*) = nullptr;
  int (*temperature)(void*, int, unsigned int*) = nullptr;  // sensor 0 = NVML_TEMPERATURE_GPU
  int (*power)(void*, unsigned int*) = nullptr;             // milliwatts
  ~Nvml() {
    if (shutdown != nullptr) shutdown();
    if (handle != nullptr) dlclose(handle);
  }
};

// Ascend DCMI's C API (dcmi_interface_api.h): 0 is success.
struct DeviceCollector::Dcmi {
  void* handle = nullptr;
  int (*init)() = nullptr;
  int (*card_list)(int*, int*, int) = nullptr;
  int (*devices_in_card)(int, int*) = nullptr;
  int (*utilization)(int, int, int, unsigned int*) = nullptr;  // input type 2 = AI Core, 6 = HBM
  int (*temperature)(int, int, int*) = nullptr;                // degrees Celsius
  int (*power)(int, int, int*) = nullptr;                      // units of 0.1 W
  ~Dcmi() {
    if (handle != nullptr) dlclose(handle);
  }
};

DeviceCollector::DeviceCollector(DeviceLibraryNames names) {
  std::string error;
  if (void* h = OpenFirst(names.nvml, &error)) {
    auto n = std::make_unique<Nvml>();
    n->handle = h;
    const bool ok = Resolve(h, "nvmlInit_v2", &n->init) &&
                    Resolve(h, "nvmlShutdown", &n->shutdown) &&
                    Resolve(h, "nvmlDeviceGetCount_v2", &n->count) &&
                    Resolve(h, "nvmlDeviceGetHandleByIndex_v2", &n->by_index) &&
                    Resolve(h, "nvmlDeviceGetUtilizationRates", &n->utilization) &&
                    Resolve(h, "nvmlDeviceGetMemoryInfo", &n->memory) &&
                    Resolve(h, "nvmlDeviceGetTemperature", &n->temperature) &&
                    Resolve(h, "nvmlDeviceGetPowerUsage", &n->power);
    if (ok && n->init() == 0) {
      nvml_ = std::move(n);
      description_.push_back("nvml: loaded");
    } else {
      n->shutdown = nullptr;  // init failed or symbols missing: nothing to shut down
      description_.push_back("nvml: present but unusable (missing symbols or nvmlInit failed)");
    }
  } else {
    description_.push_back("nvml: not found (" + error + ")");
  }
  error.clear();
  if (void* h = OpenFirst(names.dcmi, &error)) {
    auto d = std::make_unique<Dcmi>();
    d->handle = h;
    const bool ok = Resolve(h, "dcmi_init", &d->init) &&
                    Resolve(h, "dcmi_get_card_num_list", &d->card_list) &&
                    Resolve(h, "dcmi_get_device_num_in_card", &d->devices_in_card) &&
                    Resolve(h, "dcmi_get_device_utilization_rate", &d->utilization) &&
                    Resolve(h, "dcmi_get_device_temperature", &d->temperature) &&
                    Resolve(h, "dcmi_get_device_power_info", &d->power);
    if (ok && d->init() == 0) {
      dcmi_ = std::move(d);
      description_.push_back("dcmi: loaded");
    } else {
      description_.push_back("dcmi: present but unusable (missing symbols or dcmi_init failed)");
    }
  } else {
    description_.push_back("dcmi: not found (" + error + ")");
  }
  for (const std::string& line : description_) {
    CHOIR_LOG(Info, DIAG, "device metrics: {}{}", line,
              line.find("loaded") == std::string::npos ? "; device metrics from it are off" : "");
  }
}

DeviceCollector::~DeviceCollector() = default;

bool DeviceCollector::nvml_loaded() const { return nvml_ != nullptr; }
bool DeviceCollector::dcmi_loaded() const { return dcmi_ != nullptr; }
std::vector<std::string> DeviceCollector::Describe() const { return description_; }

std::vector<MetricFamily> DeviceCollector::Collect() {
  std::lock_guard<std::mutex> lock(mu_);
  MetricFamily library = Family("choir_exporter_device_library", "gauge",
                                "1 when the vendor library for device metrics was loaded, else 0.");
  library.samples.push_back(FormatSample(library.name, {{"library", "nvml"}}, nvml_ ? 1 : 0));
  library.samples.push_back(FormatSample(library.name, {{"library", "dcmi"}}, dcmi_ ? 1 : 0));
  MetricFamily util =
      Family("choir_device_utilization_ratio", "gauge", "Device compute utilisation (0..1).");
  MetricFamily mem_used =
      Family("choir_device_memory_used_bytes", "gauge", "Device memory in use.");
  MetricFamily mem_total =
      Family("choir_device_memory_total_bytes", "gauge", "Device memory size.");
  MetricFamily mem_util = Family("choir_device_memory_utilization_ratio", "gauge",
                                 "Device memory in use as a fraction (0..1).");
  MetricFamily temp = Family("choir_device_temperature_celsius", "gauge", "Device temperature.");
  MetricFamily power = Family("choir_device_power_watts", "gauge", "Device power draw.");
  if (nvml_) {
    unsigned int n = 0;
    if (nvml_->count(&n) == 0) {
      for (unsigned int i = 0; i < n; ++i) {
        void* dev = nullptr;
        if (nvml_->by_index(i, &dev) != 0) continue;
        const std::vector<std::pair<std::string, std::string>> labels = {
            {"vendor", "nvidia"}, {"device", std::to_string(i)}};
        Nvml::Utilization u{};
        if (nvml_->utilization(dev, &u) == 0)
          util.samples.push_back(FormatSample(util.name, labels, u.gpu / 100.0));
        Nvml::Memory m{};
        if (nvml_->memory(dev, &m) == 0) {
          mem_used.samples.push_back(
              FormatSample(mem_used.name, labels, static_cast<double>(m.used)));
          mem_total.samples.push_back(
              FormatSample(mem_total.name, labels, static_cast<double>(m.total)));
          if (m.total > 0)
            mem_util.samples.push_back(FormatSample(
                mem_util.name, labels, static_cast<double>(m.used) / static_cast<double>(m.total)));
        }
        unsigned int t = 0;
        if (nvml_->temperature(dev, 0, &t) == 0)
          temp.samples.push_back(FormatSample(temp.name, labels, t));
        unsigned int mw = 0;
        if (nvml_->power(dev, &mw) == 0)
          power.samples.push_back(FormatSample(power.name, labels, mw / 1000.0));
      }
    }
  }
  if (dcmi_) {
    int cards[64] = {0};
    int card_count = 0;
    if (dcmi_->card_list(&card_count, cards, 64) == 0) {
      for (int c = 0; c < card_count && c < 64; ++c) {
        int devices = 0;
        if (dcmi_->devices_in_card(cards[c], &devices) != 0) continue;
        for (int d = 0; d < devices; ++d) {
          const std::vector<std::pair<std::string, std::string>> labels = {
              {"vendor", "ascend"}, {"device", std::to_string(cards[c]) + "/" + std::to_string(d)}};
          unsigned int rate = 0;
          if (dcmi_->utilization(cards[c], d, 2, &rate) == 0)
            util.samples.push_back(FormatSample(util.name, labels, rate / 100.0));
          if (dcmi_->utilization(cards[c], d, 6, &rate) == 0)
            mem_util.samples.push_back(FormatSample(mem_util.name, labels, rate / 100.0));
          int t = 0;
          if (dcmi_->temperature(cards[c], d, &t) == 0)
            temp.samples.push_back(FormatSample(temp.name, labels, t));
          int p = 0;
          if (dcmi_->power(cards[c], d, &p) == 0)
            power.samples.push_back(FormatSample(power.name, labels, p / 10.0));
        }
      }
    }
  }
  std::vector<MetricFamily> out;
  out.push_back(std::move(library));
  for (MetricFamily* f : {&util, &mem_used, &mem_total, &mem_util, &temp, &power}) {
    if (!f->samples.empty()) out.push_back(std::move(*f));
  }
  return out;
}

}  // namespace choir::diag
