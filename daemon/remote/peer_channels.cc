#include "daemon/remote/peer_channels.h"

#include "absl/strings/str_cat.h"
#include "common/mutex.h"

namespace tensorbroker::daemon {

PeerChannels::PeerChannels(const PeerTls& tls) : credentials_(PeerChannelCredentials(tls)) {}

std::shared_ptr<grpc::Channel> PeerChannels::ChannelFor(const PeerEndpoint& peer) {
  const std::string key = absl::StrCat(peer.target, " ", peer.tls_name);
  MutexLock lock(mu_);
  auto it = channels_.find(key);
  if (it != channels_.end()) return it->second;
  if (channels_.size() >= kMaxPeerChannels) channels_.clear();
  grpc::ChannelArguments args;
  if (!peer.tls_name.empty()) args.SetSslTargetNameOverride(peer.tls_name);
  args.SetMaxReceiveMessageSize(8 << 20);  // Read chunks are 1 MiB
  auto channel = grpc::CreateCustomChannel(peer.target, credentials_, args);
  channels_.emplace(key, channel);
  return channel;
}

absl::StatusOr<std::unique_ptr<PeerChannels::Registration>> PeerChannels::Register(
    grpc::ClientContext* context) {
  MutexLock lock(mu_);
  if (cancelled_) return absl::UnavailableError("this broker is stopping");
  active_.insert(context);
  return std::make_unique<Registration>(this, context);
}

PeerChannels::Registration::~Registration() {
  MutexLock lock(channels_->mu_);
  channels_->active_.erase(context_);
}

bool PeerChannels::cancelled() const {
  MutexLock lock(mu_);
  return cancelled_;
}

void PeerChannels::CancelAll() {
  MutexLock lock(mu_);
  cancelled_ = true;
  for (grpc::ClientContext* context : active_) context->TryCancel();
}

}  // namespace tensorbroker::daemon
