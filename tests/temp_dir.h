// TempDir: a fresh directory under $TMPDIR (or /tmp) for a test, removed
// with its files when the TempDir goes. Tests that write checkpoints use it.
#ifndef GRADTAPE_TESTS_TEMP_DIR_H_
#define GRADTAPE_TESTS_TEMP_DIR_H_

#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace gradtape::testing {

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl =
        std::string(base != nullptr ? base : "/tmp") + "/gradtape-test-XXXXXX";
    path_ = mkdtemp(tmpl.data()) != nullptr ? tmpl : "";
  }
  ~TempDir() {
    Clear();
    if (!path_.empty()) ::rmdir(path_.c_str());
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Empty if the directory could not be made.
  const std::string& path() const { return path_; }
  // Removes the files in it.
  void Clear() const {
    for (const std::string& f : Files()) ::unlink((path_ + "/" + f).c_str());
  }
  // The names of the files in it.
  std::vector<std::string> Files() const {
    std::vector<std::string> out;
    DIR* d = ::opendir(path_.c_str());
    if (d == nullptr) return out;
    while (dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") out.push_back(name);
    }
    ::closedir(d);
    return out;
  }

 private:
  std::string path_;
};

}  // namespace gradtape::testing

#endif  // GRADTAPE_TESTS_TEMP_DIR_H_
