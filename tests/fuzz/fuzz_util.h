// Helpers shared by the libFuzzer targets in tests/fuzz.
#ifndef GRADTAPE_TESTS_FUZZ_FUZZ_UTIL_H_
#define GRADTAPE_TESTS_FUZZ_FUZZ_UTIL_H_

#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace gradtape::fuzz {

// A directory under $TMPDIR (or /tmp) for this process, made once; its files
// are removed by Clear() and at exit.
class ScratchDir {
 public:
  ScratchDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl =
        std::string(base != nullptr ? base : "/tmp") + "/gradtape-fuzz-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    path_ = tmpl;
  }
  ~ScratchDir() {
    Clear();
    ::rmdir(path_.c_str());
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }
  // Removes the files in the directory (checkpoints, temporary files).
  void Clear() const {
    DIR* d = ::opendir(path_.c_str());
    if (d == nullptr) return;
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") ::unlink((path_ + "/" + name).c_str());
    }
    ::closedir(d);
  }

 private:
  std::string path_;
};

// Aborts (a finding) when a property the code promises does not hold.
inline void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz property violated: %s\n", what);
    std::abort();
  }
}

}  // namespace gradtape::fuzz

#endif  // GRADTAPE_TESTS_FUZZ_FUZZ_UTIL_H_
