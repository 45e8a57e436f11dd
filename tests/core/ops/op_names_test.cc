// Every registered op is registered under its literal name: the expression
// that registers it holds Op("<name>"), and nothing else in core/ops does,
// so `grep -rn '"Cumprod"' core/ops` finds where an op is defined (no names
// from loops, ternaries or StrCat).
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/ops/ops.h"
#include "gtest/gtest.h"

namespace gradtape {
namespace {

// The concatenated text of core/ops/*.cc.
std::string OpsSources() {
  std::string text;
  const std::filesystem::path dir =
      std::filesystem::path(GRADTAPE_SOURCE_DIR) / "core" / "ops";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".cc") continue;
    std::ifstream in(entry.path());
    std::stringstream buffer;
    buffer << in.rdbuf();
    text += buffer.str();
  }
  return text;
}

int Count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + needle.size())) {
    ++n;
  }
  return n;
}

TEST(OpNames, EveryOpIsRegisteredUnderItsLiteralName) {
  const std::string sources = OpsSources();
  ASSERT_FALSE(sources.empty()) << "no sources under " << GRADTAPE_SOURCE_DIR;
  for (const auto& op : DefaultRegistry().ops()) {
    const std::string literal = absl::StrCat("Op(\"", op->name, "\")");
    EXPECT_EQ(Count(sources, literal), 1)
        << op->name << ": its registration in core/ops should hold " << literal
        << " exactly once (write the name as a literal at the registration, "
           "not from a loop, a ternary or StrCat)";
  }
}

}  // namespace
}  // namespace gradtape
