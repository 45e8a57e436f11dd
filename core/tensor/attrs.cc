#include "core/tensor/attrs.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gradtape {

absl::string_view AttrTypeName(AttrType type) {
  switch (type) {
    case AttrType::kBool:
      return "bool";
    case AttrType::kInt:
      return "int";
    case AttrType::kFloat:
      return "float";
    case AttrType::kString:
      return "string";
    case AttrType::kType:
      return "type";
    case AttrType::kIntList:
      return "list(int)";
  }
  return "?";
}

std::string AttrValueString(const AttrValue& v) {
  struct Printer {
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(int64_t i) const { return absl::StrCat(i); }
    std::string operator()(double d) const { return absl::StrCat(d); }
    std::string operator()(const std::string& s) const {
      return absl::StrCat("\"", s, "\"");
    }
    std::string operator()(DType t) const { return std::string(DTypeName(t)); }
    std::string operator()(const std::vector<int64_t>& l) const {
      return absl::StrCat("[", absl::StrJoin(l, ","), "]");
    }
  };
  return std::visit(Printer{}, v);
}

void AttrMap::Set(absl::string_view name, AttrValue value) {
  for (auto& [key, val] : entries_) {
    if (key == name) {
      val = std::move(value);
      return;
    }
  }
  entries_.emplace_back(std::string(name), std::move(value));
}

const AttrValue* AttrMap::Find(absl::string_view name) const {
  for (const auto& [key, val] : entries_) {
    if (key == name) return &val;
  }
  return nullptr;
}

}  // namespace gradtape
