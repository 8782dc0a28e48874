/*
 * gpufleet test fixture: a fake libnvidia-ml.so.1 for hosts without NVIDIA GPUs.
 *
 * It exports the NVML entry points that nvidia-ml-py (pynvml) calls for gpufleet's nvml_info module and
 * answers from a fixture file, so the real pynvml binding is exercised through its normal library lookup
 * (CDLL("libnvidia-ml.so.1")). Fixtures are written as JSON (tests/fixtures/nvml/) and flattened by
 * tests/harness/fake_nvml.py into "key value" lines that this file reads at nvmlInit:
 *
 *   init_error 9                      return code of nvmlInit (0 = success)
 *   driver_version 550.127.05         system strings / numbers
 *   count 5                           number of GPUs
 *   gpu.<i>.<field> <value>           device values (see the lookups below)
 *   gpu.<i>.handle_error 15           nvmlDeviceGetHandleByIndex fails with this code (e.g. GPU lost)
 *   gpu.<i>.error.<query> 3           that query fails with this code (e.g. NOT_SUPPORTED)
 *
 * Critical XID events (what the device plugin's health check waits for) come from a second file, appended to while
 * processes run: one "<gpu index> <xid>" line per event, $GPUFLEET_FAKE_NVML_EVENTS or
 * /etc/gpufleet-fake-nvml/xid-events. Every event set delivers each line once, in order.
 *
 * The fixture path comes from $GPUFLEET_FAKE_NVML, else /etc/gpufleet-fake-nvml/fixture.conf.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int nvmlReturn_t;
typedef struct { unsigned int index; } fake_device_t;
typedef fake_device_t *nvmlDevice_t;

enum {
  NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_NOT_FOUND = 6, NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_TIMEOUT = 10, NVML_ERROR_UNKNOWN = 999
};

/* Every other NVML symbol the lab's Go binaries reference is a generated stub (fake_nvml.py) that calls this: it
 * says so once per name on stderr and answers NOT_SUPPORTED. The lab tests fail on that line in any log. */
int gpufleet_fake_nvml_unimplemented(const char *name);
int gpufleet_fake_nvml_unimplemented(const char *name) {
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  static const char *said[512];
  static int n_said;
  int first = 1;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n_said; i++)
    if (said[i] == name) first = 0;
  if (first && n_said < 512) said[n_said++] = name;
  pthread_mutex_unlock(&lock);
  if (first) fprintf(stderr, "gpufleet-fake-nvml: unimplemented %s called (answered NOT_SUPPORTED)\n", name);
  return 3; /* NVML_ERROR_NOT_SUPPORTED */
}

#define MAX_ENTRIES 4096
#define MAX_GPUS 64
static char *keys[MAX_ENTRIES];
static char *values[MAX_ENTRIES];
static int n_entries;
static int initialized;
static fake_device_t devices[MAX_GPUS];

static void clear_fixture(void) {
  for (int i = 0; i < n_entries; i++) { free(keys[i]); free(values[i]); }
  n_entries = 0;
}

static int load_fixture(void) {
  const char *path = getenv("GPUFLEET_FAKE_NVML");
  if (!path || !*path) path = "/etc/gpufleet-fake-nvml/fixture.conf";
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  clear_fixture();
  char line[1024];
  while (fgets(line, sizeof line, f) && n_entries < MAX_ENTRIES) {
    line[strcspn(line, "\n")] = 0;
    char *sp = strchr(line, ' ');
    if (line[0] == '#' || !sp) continue;
    *sp = 0;
    keys[n_entries] = strdup(line);
    values[n_entries] = strdup(sp + 1);
    n_entries++;
  }
  fclose(f);
  return 0;
}

static const char *get(const char *key) {
  for (int i = 0; i < n_entries; i++)
    if (strcmp(keys[i], key) == 0) return values[i];
  return NULL;
}

static const char *gpu_get(unsigned int idx, const char *field) {
  char key[128];
  snprintf(key, sizeof key, "gpu.%u.%s", idx, field);
  return get(key);
}

static unsigned long long num(const char *v) { return v ? strtoull(v, NULL, 10) : 0; }

/* Per-query failure injection; a missing value is reported as NOT_SUPPORTED, as NVML does. */
static nvmlReturn_t query_status(nvmlDevice_t dev, const char *query, const char *field) {
  char key[128];
  if (!initialized) return NVML_ERROR_UNINITIALIZED;
  if (!dev) return NVML_ERROR_INVALID_ARGUMENT;
  snprintf(key, sizeof key, "error.%s", query);
  const char *err = gpu_get(dev->index, key);
  if (err) return (nvmlReturn_t)atoi(err);
  if (field && !gpu_get(dev->index, field)) return NVML_ERROR_NOT_SUPPORTED;
  return NVML_SUCCESS;
}

static nvmlReturn_t copy_str(const char *v, char *buf, unsigned int len) {
  if (!v) return NVML_ERROR_NOT_SUPPORTED;
  if (strlen(v) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
  strcpy(buf, v);
  return NVML_SUCCESS;
}

/* NVML counts initialisations: nvmlShutdown only shuts down when every nvmlInit has been matched (the device
 * plugin keeps one open while its resource managers open and close their own). */
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
  (void)flags;
  pthread_mutex_lock(&init_lock);
  nvmlReturn_t rc = NVML_SUCCESS;
  if (initialized == 0) {
    if (load_fixture() != 0) rc = NVML_ERROR_UNKNOWN;
    else rc = (int)num(get("init_error"));
    if (rc == NVML_SUCCESS)
      for (unsigned int i = 0; i < MAX_GPUS; i++) devices[i].index = i;
  }
  if (rc == NVML_SUCCESS) initialized++;
  pthread_mutex_unlock(&init_lock);
  return rc;
}
nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
  pthread_mutex_lock(&init_lock);
  nvmlReturn_t rc = initialized ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
  if (initialized) initialized--;
  pthread_mutex_unlock(&init_lock);
  return rc;
}

const char *nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 9: return "Driver Not Loaded";
    case 12: return "NVML Shared Library Not Found";
    case 15: return "GPU is lost";
    case 16: return "GPU requires restart";
    case 18: return "Driver/library version mismatch";
    default: return "Unknown Error";
  }
}

#define SYS_GUARD() do { if (!initialized) return NVML_ERROR_UNINITIALIZED; } while (0)

nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int len) { SYS_GUARD(); return copy_str(get("driver_version"), v, len); }
nvmlReturn_t nvmlSystemGetNVMLVersion(char *v, unsigned int len) { SYS_GUARD(); return copy_str(get("nvml_version"), v, len); }
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) {
  SYS_GUARD();
  if (!get("cuda_driver_version")) return NVML_ERROR_NOT_SUPPORTED;
  *v = (int)num(get("cuda_driver_version"));
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) { SYS_GUARD(); *count = (unsigned int)num(get("count")); return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *dev) {
  SYS_GUARD();
  if (index >= num(get("count")) || index >= MAX_GPUS) return NVML_ERROR_INVALID_ARGUMENT;
  const char *err = gpu_get(index, "handle_error");
  if (err) return (nvmlReturn_t)atoi(err);
  *dev = &devices[index];
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *dev) { return nvmlDeviceGetHandleByIndex_v2(index, dev); }

#define STR_QUERY(fn, field) \
  nvmlReturn_t fn(nvmlDevice_t d, char *buf, unsigned int len) { \
    nvmlReturn_t r = query_status(d, #fn, field); \
    return r ? r : copy_str(gpu_get(d->index, field), buf, len); }
STR_QUERY(nvmlDeviceGetUUID, "uuid")
STR_QUERY(nvmlDeviceGetName, "name")

#define UINT_QUERY(fn, field) \
  nvmlReturn_t fn(nvmlDevice_t d, unsigned int *out) { \
    nvmlReturn_t r = query_status(d, #fn, field); \
    if (r) return r; \
    *out = (unsigned int)num(gpu_get(d->index, field)); \
    return NVML_SUCCESS; }
UINT_QUERY(nvmlDeviceGetCurrPcieLinkGeneration, "pcie_link_gen_current")
UINT_QUERY(nvmlDeviceGetMaxPcieLinkGeneration, "pcie_link_gen_max")
UINT_QUERY(nvmlDeviceGetCurrPcieLinkWidth, "pcie_link_width_current")
UINT_QUERY(nvmlDeviceGetMaxPcieLinkWidth, "pcie_link_width_max")
UINT_QUERY(nvmlDeviceGetPowerManagementLimit, "power_limit_mw")
UINT_QUERY(nvmlDeviceGetPersistenceMode, "persistence_mode")
UINT_QUERY(nvmlDeviceGetComputeMode, "compute_mode")
UINT_QUERY(nvmlDeviceGetRetiredPagesPendingStatus, "retired_pages_pending")
UINT_QUERY(nvmlDeviceGetMinorNumber, "minor_number")

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *out) {
  nvmlReturn_t r = query_status(d, "nvmlDeviceGetIndex", NULL);
  if (r) return r;
  *out = d->index;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor) {
  nvmlReturn_t r = query_status(d, "nvmlDeviceGetCudaComputeCapability", "cuda_compute_capability");
  if (r) return r;
  const char *v = gpu_get(d->index, "cuda_compute_capability");
  if (sscanf(v, "%d.%d", major, minor) != 2) return NVML_ERROR_UNKNOWN;
  return NVML_SUCCESS;
}

typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
  nvmlReturn_t r = query_status(d, "nvmlDeviceGetUtilizationRates", NULL);
  if (r) return r;
  u->gpu = (unsigned int)num(gpu_get(d->index, "utilization_gpu"));
  u->memory = (unsigned int)num(gpu_get(d->index, "utilization_memory"));
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *dev) {
  SYS_GUARD();
  if (!uuid || !dev) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned long long count = num(get("count"));
  for (unsigned int i = 0; i < count && i < MAX_GPUS; i++) {
    const char *have = gpu_get(i, "uuid");
    if (have && strcmp(have, uuid) == 0) {
      if (gpu_get(i, "handle_error")) return (nvmlReturn_t)atoi(gpu_get(i, "handle_error"));
      *dev = &devices[i];
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

/* Events. GeForce cards report critical XIDs, P-state and clock changes; no ECC events. */
#define EVENT_XID_CRITICAL 0x8ULL
#define EVENT_SUPPORTED (0x4ULL | EVENT_XID_CRITICAL | 0x10ULL)
typedef struct { long delivered; unsigned long long mask[MAX_GPUS]; } fake_event_set_t;
typedef fake_event_set_t *nvmlEventSet_t;
typedef struct {
  nvmlDevice_t device;
  unsigned long long eventType, eventData;
  unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types) {
  nvmlReturn_t r = query_status(d, "nvmlDeviceGetSupportedEventTypes", NULL);
  if (r) return r;
  *types = EVENT_SUPPORTED;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
  SYS_GUARD();
  *set = calloc(1, sizeof(fake_event_set_t));
  return *set ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  free(set);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set) {
  nvmlReturn_t r = query_status(d, "nvmlDeviceRegisterEvents", NULL);
  if (r) return r;
  if (types & ~EVENT_SUPPORTED) return NVML_ERROR_NOT_SUPPORTED;
  set->mask[d->index] |= types;
  return NVML_SUCCESS;
}

/* The next undelivered XID line for a GPU of this set; 1 when one was found. */
static int next_event(nvmlEventSet_t set, nvmlEventData_t *data) {
  const char *path = getenv("GPUFLEET_FAKE_NVML_EVENTS");
  if (!path || !*path) path = "/etc/gpufleet-fake-nvml/xid-events";
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[128];
  long n = 0;
  int found = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned int gpu;
    unsigned long long xid;
    if (sscanf(line, "%u %llu", &gpu, &xid) != 2) continue;
    if (n++ < set->delivered) continue;
    set->delivered = n;
    if (gpu >= MAX_GPUS || !(set->mask[gpu] & EVENT_XID_CRITICAL)) continue;
    data->device = &devices[gpu];
    data->eventType = EVENT_XID_CRITICAL;
    data->eventData = xid;
    data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFF;
    found = 1;
    break;
  }
  fclose(f);
  return found;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
  SYS_GUARD();
  /* Waits as NVML does, for an event or the timeout (in steps, so a new event line is seen soon). */
  for (unsigned int waited = 0;; waited += 100) {
    if (next_event(set, data)) return NVML_SUCCESS;
    if (waited >= timeoutms) return NVML_ERROR_TIMEOUT;
    struct timespec step = {0, 100 * 1000 * 1000};
    nanosleep(&step, NULL);
  }
}
nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
  return nvmlEventSetWait_v2(set, data, timeoutms);
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *out) {
  (void)sensor;
  nvmlReturn_t r = query_status(d, "nvmlDeviceGetTemperature", "temperature_c");
  if (r) return r;
  *out = (unsigned int)num(gpu_get(d->index, "temperature_c"));
  return NVML_SUCCESS;
}

typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
  nvmlReturn_t r = query_status(d, "nvmlDeviceGetMemoryInfo", "memory_total_bytes");
  if (r) return r;
  m->total = num(gpu_get(d->index, "memory_total_bytes"));
  m->used = num(gpu_get(d->index, "memory_used_bytes"));
  m->free = m->total - m->used;
  return NVML_SUCCESS;
}

typedef struct {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p) {
  nvmlReturn_t r = query_status(d, "nvmlDeviceGetPciInfo", "pci_bus_id");
  if (r) return r;
  memset(p, 0, sizeof *p);
  const char *id = gpu_get(d->index, "pci_bus_id");
  snprintf(p->busId, sizeof p->busId, "%s", id);
  snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "%s", id + (strlen(id) > 12 ? 4 : 0));
  sscanf(id, "%x:%x:%x", &p->domain, &p->bus, &p->device);
  p->pciDeviceId = (unsigned int)strtoul(gpu_get(d->index, "pci_device_id") ? gpu_get(d->index, "pci_device_id") : "0", NULL, 16);
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t *p) { return nvmlDeviceGetPciInfo_v3(d, p); }

nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t d, int *current, int *pending) {
  nvmlReturn_t r = query_status(d, "nvmlDeviceGetEccMode", "ecc_mode_current");
  if (r) return r;
  *current = (int)num(gpu_get(d->index, "ecc_mode_current"));
  *pending = (int)num(gpu_get(d->index, "ecc_mode_pending"));
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int error_type, int counter_type, unsigned long long *out) {
  /* error_type 1 = uncorrected; counter_type 0 = volatile, 1 = aggregate. */
  const char *field = error_type == 1 ? (counter_type == 0 ? "ecc_uncorrected_volatile" : "ecc_uncorrected_aggregate")
                                      : (counter_type == 0 ? "ecc_corrected_volatile" : "ecc_corrected_aggregate");
  nvmlReturn_t r = query_status(d, "nvmlDeviceGetTotalEccErrors", field);
  if (r) return r;
  *out = num(gpu_get(d->index, field));
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned int *corr, unsigned int *unc, unsigned int *pending,
                                       unsigned int *failure) {
  nvmlReturn_t r = query_status(d, "nvmlDeviceGetRemappedRows", "remapped_rows_pending");
  if (r) return r;
  *corr = (unsigned int)num(gpu_get(d->index, "remapped_rows_correctable"));
  *unc = (unsigned int)num(gpu_get(d->index, "remapped_rows_uncorrectable"));
  *pending = (unsigned int)num(gpu_get(d->index, "remapped_rows_pending"));
  *failure = (unsigned int)num(gpu_get(d->index, "remapped_rows_failure"));
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending) {
  nvmlReturn_t r = query_status(d, "nvmlDeviceGetMigMode", "mig_mode_current");
  if (r) return r;
  *current = (unsigned int)num(gpu_get(d->index, "mig_mode_current"));
  *pending = (unsigned int)num(gpu_get(d->index, "mig_mode_pending"));
  return NVML_SUCCESS;
}
