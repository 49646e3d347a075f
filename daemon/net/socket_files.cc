#include "daemon/net/socket_files.h"

namespace tensorbroker::daemon {

SocketFiles::~SocketFiles() {
  if (handed_over_.load()) return;
  for (const File& file : files_) file.identity.RemoveFileIfOurs(file.path);
}

void SocketFiles::Add(const std::string& path, const UnixListener& listener) {
  File file;
  file.path = path;
  file.identity.inherited = listener.inherited;
  file.identity.file_identity = listener.file_identity;
  files_.push_back(std::move(file));
}

void SocketFiles::ClaimAll() {
  for (File& file : files_) file.identity.ClaimFile(file.path);
}

}  // namespace tensorbroker::daemon
