// A private temporary directory for a test: mkdtemp(3) under $TMPDIR (mode 0700, this process's),
// removed with everything in it when the object goes. path() is empty when it could not be
// made. Not copyable; one owner.
#ifndef TENSORBROKER_TESTS_SUPPORT_TEMP_DIR_H_
#define TENSORBROKER_TESTS_SUPPORT_TEMP_DIR_H_

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace tensorbroker::testing {

class TempDir {
 public:
  // `prefix` names it in listings: /tmp/<prefix>.XXXXXX.
  explicit TempDir(const std::string& prefix = "tbtest") {
    std::string t = (std::filesystem::temp_directory_path() / (prefix + ".XXXXXX")).string();
    if (::mkdtemp(t.data()) != nullptr) path_ = t;
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace tensorbroker::testing

#endif  // TENSORBROKER_TESTS_SUPPORT_TEMP_DIR_H_
