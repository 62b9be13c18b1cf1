#include "core/collector.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace sonde {

void Registry::add(CollectorInfo info) {
  infos_.push_back(std::move(info));
}

const CollectorInfo* Registry::find(const std::string& target) const {
  for (const auto& i : infos_) {
    if (i.target == target) return &i;
    const auto dot = i.target.rfind('.');
    if (dot != std::string::npos && i.target.compare(dot + 1, std::string::npos, target) == 0)
      return &i;
  }
  return nullptr;
}

void Registry::add_factory(TargetFactory factory) {
  factories_.push_back(std::move(factory));
}

const TargetFactory* Registry::find_factory(const std::string& target) const {
  for (const auto& f : factories_) {
    const bool exact = f.prefix.back() != ':';
    if (exact ? target == f.prefix : target.rfind(f.prefix, 0) == 0) return &f;
  }
  return nullptr;
}

namespace {
std::string_view type_name(ParamType t) {
  switch (t) {
    case ParamType::boolean: return "a boolean (true/false)";
    case ParamType::integer: return "an integer";
    case ParamType::number: return "a number";
    case ParamType::string: return "a string";
    case ParamType::string_list: return "a list of strings";
  }
  return "?";
}

std::string show(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a map";
  return "nothing";
}
}  // namespace

Result<ParamValue> convert_param(const ParamSpec& spec, const KwArg& arg,
                                 const std::string& collector) {
  const YAML::Node& n = arg.value;
  auto bad = [&]() -> Result<ParamValue> {
    return make_error(Errc::config,
                      fmt::format("{}: collector '{}': '{}' expected {}, got {}", arg.origin.str(),
                                  collector, spec.name, type_name(spec.type), show(n)));
  };
  try {
    switch (spec.type) {
      case ParamType::boolean: {
        bool b = false;
        if (!n.IsScalar() || !YAML::convert<bool>::decode(n, b)) return bad();
        return ParamValue(b);
      }
      case ParamType::integer: {
        long long v = 0;
        if (!n.IsScalar() || !YAML::convert<long long>::decode(n, v)) return bad();
        return ParamValue(v);
      }
      case ParamType::number: {
        double v = 0;
        if (!n.IsScalar() || !YAML::convert<double>::decode(n, v)) return bad();
        return ParamValue(v);
      }
      case ParamType::string:
        if (!n.IsScalar()) return bad();
        return ParamValue(n.Scalar());
      case ParamType::string_list: {
        if (!n.IsSequence()) return bad();
        std::vector<std::string> out;
        for (const auto& item : n) {
          if (!item.IsScalar()) return bad();
          out.push_back(item.Scalar());
        }
        return ParamValue(std::move(out));
      }
    }
  } catch (const YAML::Exception&) {
    return bad();
  }
  return bad();
}

}  // namespace sonde
