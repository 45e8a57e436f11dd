// Attribute values of an op execution (TensorFlow's attrs).
#ifndef GRADTAPE_CORE_TENSOR_ATTRS_H_
#define GRADTAPE_CORE_TENSOR_ATTRS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/string_view.h"
#include "core/tensor/tensor.h"

namespace gradtape {

// The index of each alternative is its AttrType.
using AttrValue = std::variant<bool, int64_t, double, std::string, DType,
                               std::vector<int64_t>>;
enum class AttrType { kBool, kInt, kFloat, kString, kType, kIntList };
absl::string_view AttrTypeName(AttrType type);
inline AttrType TypeOf(const AttrValue& v) {
  return static_cast<AttrType>(v.index());
}
std::string AttrValueString(const AttrValue& v);

// A small name -> value map (ops have few attrs; linear search wins).
class AttrMap {
 public:
  AttrMap() = default;
  AttrMap(std::initializer_list<std::pair<std::string, AttrValue>> init)
      : entries_(init.begin(), init.end()) {}

  // Inserts or replaces.
  void Set(absl::string_view name, AttrValue value);
  const AttrValue* Find(absl::string_view name) const;
  // Typed access to an attr that op validation guaranteed present and typed.
  template <typename T>
  const T& Get(absl::string_view name) const {
    return std::get<T>(*Find(name));
  }
  bool Bool(absl::string_view name) const { return Get<bool>(name); }
  int64_t Int(absl::string_view name) const { return Get<int64_t>(name); }
  double Float(absl::string_view name) const { return Get<double>(name); }
  DType Type(absl::string_view name) const { return Get<DType>(name); }
  const std::vector<int64_t>& IntList(absl::string_view name) const {
    return Get<std::vector<int64_t>>(name);
  }

  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }
  auto begin() const { return entries_.begin(); }
  auto end() const { return entries_.end(); }

 private:
  absl::InlinedVector<std::pair<std::string, AttrValue>, 2> entries_;
};

}  // namespace gradtape

#endif  // GRADTAPE_CORE_TENSOR_ATTRS_H_
