#include "aggregator/process_json.h"

#include <cstdio>

namespace rlscope {

std::string HexSession(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

void WriteIdentity(JsonWriter& w, const ProcessView& p, bool selected) {
  const wire::Identity& id = p.identity();
  w.Key("session").String(HexSession(p.hello().session));
  w.Key("label").String(ProcessLabel(p));
  w.Key("host").String(id.host);
  w.Key("pid").Int(id.pid);
  w.Key("rank").IntOrNull(id.rank);
  w.Key("role").String(id.role);
  w.Key("name").String(ProcessName(p));
  w.Key("selected").Bool(selected);
  w.Key("labels").BeginObject();
  for (const auto& [k, v] : id.labels) w.Key(k).String(v);
  w.EndObject();
}

void WriteClock(JsonWriter& w, const ProcessView& p) {
  const ClockEstimate& e = p.clock();
  w.Key("clock").BeginObject();
  w.Key("aligned").Bool(e.valid());
  w.Key("basis").String(ClockBasisName(e.basis));
  w.Key("offset_ns").Int(e.offset_ns);
  w.Key("ref_ns").Int(e.ref_ns);
  w.Key("drift_ppm").Double(e.drift * 1e6);
  w.Key("bound_ns").IntOrNull(e.bound_ns);
  w.Key("probes").Int(e.probes);
  w.Key("bursts").Int(e.bursts);
  w.Key("outlier_bursts").Int(e.outlier_bursts);
  w.Key("causality_bounds").Int(e.causality_bounds);
  w.Key("causality_tightened").Bool(e.causality_tightened);
  w.Key("causality_conflict").Bool(e.causality_conflict);
  w.EndObject();
}

void WriteExpected(JsonWriter& w, const std::vector<ExpectedProcess>& list) {
  w.BeginArray();
  for (const ExpectedProcess& e : list) {
    w.BeginObject();
    for (const auto& [k, v] : e) w.Key(k).String(v);
    w.EndObject();
  }
  w.EndArray();
}

}  // namespace rlscope
