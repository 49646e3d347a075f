// tensorbroker_tenancy_peer: another user, driven line by line, for tenancy_test.cc. Started as
// root, it first becomes `--uid` with primary group `--gid` (0 in the tests: the socket's group,
// so that it may connect) and the supplementary `--groups` (comma-separated gids, or none), then
// opens a Session on the daemon's gRPC socket and answers each command read from stdin with one
// line on stdout:
//   code=<gRPC code> [key=value ...] msg=<the status message, to the end of the line>
// Commands (NAME has no spaces; READERS is comma-separated, e.g. uid:0,gid:100):
//   whoami                                   uid=, gids= (as the kernel now says)
//   put NAME BYTES FILL [replace] [readers=READERS]    gRPC Put of BYTES uint8s all FILL;
//                                            version=, owner=
//   create NAME BYTES [replace] [readers=READERS]      gRPC Create; lease=, segment=
//   seal NAME | abort NAME | delete NAME
//   get NAME WAIT_MS                         gRPC Get; lease=, segment=, version=
//   stat NAME                                owner=, readers=, version=
//   read NAME                                gRPC Read; bytes= (total), fill= (the byte every
//                                            byte equals, or "mixed")
//   list PREFIX PAGE_SIZE                    every page (PREFIX - for none); names=
//                                            (comma-separated), pages=
//   stats                                    tensors=, users= (uid:bytes:tensors:qb:qt;...)
//   release LEASE | retain LEASE             gRPC, in this peer's session
//   local_open                               opens a session on the local channel
//   local_get NAME MARKERS                   local-channel Get; maps each descriptor it got
//                                            (read-only, the whole segment) and says for each
//                                            of the comma-separated hex MARKERS whether it is
//                                            anywhere in it: lease=, segment=, descriptors=,
//                                            writable=, found= (1 or 0 each, comma-separated)
//   local_directory MARKERS                  local-channel open_fast_reads: maps the directory
//                                            read-only and says for each MARKER (as local_get)
//                                            whether it is in it, and whether the directory's
//                                            descriptor maps writable too: descriptors=,
//                                            found=, directory_writable= (keeps the lease table)
//   local_pin VALUES                         writes each comma-separated value into the next
//                                            free slot of the lease table local_directory kept
//                                            (raw stores, as a hostile process may): a number,
//                                            or @NAME for the pin token the directory's record
//                                            of NAME holds (0 if none), each take counted in
//                                            the table's header: pinned= (all so far)
//   local_retain LEASE | local_fetch LEASE   local-channel Retain / FetchSegment: descriptors=
//   local_release LEASE                      batched release of LEASE, then a barrier
//   watch PREFIX AFTER COUNT WAIT_MS         gRPC Watch (PREFIX - for none) after sequence
//                                            AFTER ("-": from now)
//                                            until COUNT events or WAIT_MS passed (then
//                                            DEADLINE_EXCEEDED); events= KIND:NAME:VERSION,...
// A command the peer cannot parse, or an I/O failure, ends it with "fatal ..." and exit 3.
// Every call carries a 30 s deadline: a hang guard, never a measurement.
#include <grp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/directory_records.h"
#include "common/fd_passing.h"
#include "common/unique_fd.h"
#include "tensorbroker/v1/broker.grpc.pb.h"
#include "tensorbroker/v1/local.pb.h"

namespace {

namespace v1 = tensorbroker::v1;

[[noreturn]] void Die(const std::string& why) {
  std::cout << "fatal " << why << std::endl;
  std::exit(3);
}

std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return context;
}

std::string OneLine(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

// The reply line: code, fields in order, then the message.
struct Answer {
  int code = 0;
  std::vector<std::pair<std::string, std::string>> fields;
  std::string message;

  Answer& Set(const std::string& key, const std::string& value) {
    fields.emplace_back(key, value);
    return *this;
  }
  std::string Line() const {
    std::string line = absl::StrCat("code=", code);
    for (const auto& [key, value] : fields) absl::StrAppend(&line, " ", key, "=", value);
    absl::StrAppend(&line, " msg=", OneLine(message));
    return line;
  }
};

Answer FromGrpc(const grpc::Status& status) {
  Answer answer;
  answer.code = static_cast<int>(status.error_code());
  answer.message = status.error_message();
  return answer;
}

v1::DataType Uint8() {
  v1::DataType dtype;
  dtype.set_code(1);
  dtype.set_bits(8);
  dtype.set_lanes(1);
  return dtype;
}

uint64_t Number(const std::string& text) {
  uint64_t value = 0;
  if (!absl::SimpleAtoi(text, &value)) Die("not a number: " + text);
  return value;
}

// Options after the positional words: "replace" and "readers=A,B".
struct Extras {
  bool replace = false;
  std::vector<std::string> readers;
};

Extras ParseExtras(const std::vector<std::string>& words, size_t from) {
  Extras extras;
  for (size_t i = from; i < words.size(); ++i) {
    if (words[i] == "replace") {
      extras.replace = true;
    } else if (words[i].rfind("readers=", 0) == 0) {
      extras.readers = absl::StrSplit(words[i].substr(8), ',');
    } else {
      Die("unknown option " + words[i]);
    }
  }
  return extras;
}

class Peer {
 public:
  explicit Peer(const std::string& socket_path)
      : socket_path_(socket_path),
        stub_(v1::Broker::NewStub(
            grpc::CreateChannel("unix:" + socket_path, grpc::InsecureChannelCredentials()))) {
    session_ = stub_->Session(&session_context_);
    v1::SessionRequest hello;
    hello.mutable_hello()->set_pid(static_cast<int32_t>(::getpid()));
    hello.mutable_hello()->set_client_name("tenancy_peer");
    v1::SessionEvent event;
    if (!session_->Write(hello) || !session_->Read(&event) || !event.has_opened()) {
      Die("no session: " + session_->Finish().error_message());
    }
    session_id_ = event.opened().session_id();
  }
  ~Peer() {
    session_context_.TryCancel();
    (void)session_->Finish();
  }

  Answer Handle(const std::vector<std::string>& words) {
    // Each command and the fewest words it takes, itself included.
    static const std::map<std::string, size_t> kArity = {
        {"whoami", 1},       {"put", 4},         {"create", 3},
        {"seal", 2},         {"abort", 2},       {"delete", 2},
        {"get", 3},          {"stat", 2},        {"read", 2},
        {"list", 3},         {"stats", 1},       {"release", 2},
        {"retain", 2},       {"local_open", 1},  {"local_get", 3},
        {"local_retain", 2}, {"local_fetch", 2}, {"local_release", 2},
        {"local_cancel", 2}, {"watch", 5},       {"local_directory", 2},
        {"local_pin", 2}};
    const std::string& verb = words[0];
    auto arity = kArity.find(verb);
    if (arity == kArity.end()) Die("unknown command " + verb);
    if (words.size() < arity->second) Die("too few words for " + verb);
    if (verb == "whoami") return WhoAmI();
    if (verb == "put") {
      return Put(words[1], Number(words[2]), Number(words[3]), ParseExtras(words, 4));
    }
    if (verb == "create") return Create(words[1], Number(words[2]), ParseExtras(words, 3));
    if (verb == "seal") return Seal(words[1]);
    if (verb == "abort") return Abort(words[1]);
    if (verb == "delete") return Delete(words[1]);
    if (verb == "get") return Get(words[1], Number(words[2]));
    if (verb == "stat") return Stat(words[1]);
    if (verb == "read") return Read(words[1]);
    if (verb == "list") return List(words[1] == "-" ? "" : words[1], Number(words[2]));
    if (verb == "stats") return Stats();
    if (verb == "release") return Release(Number(words[1]));
    if (verb == "retain") return Retain(Number(words[1]));
    if (verb == "local_open") return LocalOpen();
    if (verb == "local_get") return LocalGet(words[1], words[2]);
    if (verb == "local_cancel") return LocalCancelUpTo(Number(words[1]));
    if (verb == "local_directory") return LocalDirectory(words[1]);
    if (verb == "local_pin") return LocalPin(words[1]);
    if (verb == "watch") {
      return Watch(words[1] == "-" ? "" : words[1], words[2], Number(words[3]), Number(words[4]));
    }
    return LocalLeaseCall(verb, Number(words[1]));
  }

 private:
  static Answer WhoAmI() {
    gid_t groups[64];
    const int n = ::getgroups(64, groups);
    std::vector<std::string> gids = {std::to_string(::getgid())};
    for (int i = 0; i < n; ++i) gids.push_back(std::to_string(groups[i]));
    return Answer().Set("uid", std::to_string(::getuid())).Set("gids", absl::StrJoin(gids, ","));
  }

  Answer Put(const std::string& name, uint64_t bytes, uint64_t fill, const Extras& extras) {
    v1::TensorInfo info;
    auto context = Context();
    auto writer = stub_->Put(context.get(), &info);
    v1::PutRequest header;
    header.mutable_header()->set_name(name);
    *header.mutable_header()->mutable_dtype() = Uint8();
    header.mutable_header()->add_shape(static_cast<int64_t>(bytes));
    header.mutable_header()->set_replace(extras.replace);
    for (const std::string& reader : extras.readers) header.mutable_header()->add_readers(reader);
    if (writer->Write(header) && bytes > 0) {
      v1::PutRequest data;
      data.set_data(std::string(bytes, static_cast<char>(fill)));
      writer->Write(data);
    }
    writer->WritesDone();
    Answer answer = FromGrpc(writer->Finish());
    if (answer.code == 0) {
      answer.Set("version", std::to_string(info.version()))
          .Set("owner", std::to_string(info.owner_uid()));
    }
    return answer;
  }

  Answer Create(const std::string& name, uint64_t bytes, const Extras& extras) {
    v1::CreateRequest request;
    request.set_session_id(session_id_);
    request.set_name(name);
    *request.mutable_dtype() = Uint8();
    request.add_shape(static_cast<int64_t>(bytes));
    request.set_replace(extras.replace);
    for (const std::string& reader : extras.readers) request.add_readers(reader);
    v1::TensorGrant grant;
    Answer answer = FromGrpc(stub_->Create(Context().get(), request, &grant));
    if (answer.code == 0) AddGrant(grant, &answer);
    return answer;
  }

  Answer Seal(const std::string& name) {
    v1::SealRequest request;
    request.set_session_id(session_id_);
    request.set_name(name);
    v1::TensorInfo info;
    Answer answer = FromGrpc(stub_->Seal(Context().get(), request, &info));
    if (answer.code == 0) answer.Set("version", std::to_string(info.version()));
    return answer;
  }

  Answer Abort(const std::string& name) {
    v1::AbortRequest request;
    request.set_session_id(session_id_);
    request.set_name(name);
    v1::Empty empty;
    return FromGrpc(stub_->Abort(Context().get(), request, &empty));
  }

  Answer Delete(const std::string& name) {
    v1::DeleteRequest request;
    request.set_name(name);
    v1::Empty empty;
    return FromGrpc(stub_->Delete(Context().get(), request, &empty));
  }

  Answer Get(const std::string& name, uint64_t wait_ms) {
    v1::GetRequest request;
    request.set_session_id(session_id_);
    request.set_name(name);
    request.set_wait_ms(static_cast<uint32_t>(wait_ms));
    v1::TensorGrant grant;
    Answer answer = FromGrpc(stub_->Get(Context().get(), request, &grant));
    if (answer.code == 0) AddGrant(grant, &answer);
    return answer;
  }

  static void AddGrant(const v1::TensorGrant& grant, Answer* answer) {
    answer->Set("lease", std::to_string(grant.lease_id()))
        .Set("segment", grant.region().segment())
        .Set("version", std::to_string(grant.info().version()));
  }

  Answer Stat(const std::string& name) {
    v1::StatRequest request;
    request.set_name(name);
    v1::TensorInfo info;
    Answer answer = FromGrpc(stub_->Stat(Context().get(), request, &info));
    if (answer.code == 0) {
      answer.Set("owner", std::to_string(info.owner_uid()))
          .Set("readers", absl::StrJoin(info.readers(), ","))
          .Set("version", std::to_string(info.version()));
    }
    return answer;
  }

  Answer Read(const std::string& name) {
    v1::ReadRequest request;
    request.set_name(name);
    auto context = Context();
    auto reader = stub_->Read(context.get(), request);
    v1::ReadResponse response;
    uint64_t total = 0;
    int fill = -1;  // -1: nothing yet; 256: mixed
    while (reader->Read(&response)) {
      for (unsigned char c : response.data()) {
        if (fill == -1) fill = c;
        if (fill != c) fill = 256;
      }
      total += response.data().size();
    }
    Answer answer = FromGrpc(reader->Finish());
    if (answer.code == 0) {
      answer.Set("bytes", std::to_string(total))
          .Set("fill", fill == 256  ? "mixed"
                       : fill == -1 ? "none"
                                    : std::to_string(fill));
    }
    return answer;
  }

  Answer Watch(const std::string& prefix, const std::string& after, uint64_t count,
               uint64_t wait_ms) {
    v1::WatchRequest request;
    request.set_prefix(prefix);
    if (after != "-") request.set_after_version(Number(after));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(wait_ms));
    auto reader = stub_->Watch(&context, request);
    std::vector<std::string> events;
    v1::WatchEvent event;
    while (events.size() < count && reader->Read(&event)) {
      events.push_back(absl::StrCat(v1::WatchEvent::Kind_Name(event.kind()), ":", event.name(), ":",
                                    event.version()));
    }
    if (events.size() == count) context.TryCancel();
    Answer answer = events.size() == count ? Answer{} : FromGrpc(reader->Finish());
    if (events.size() == count) (void)reader->Finish();
    answer.Set("events", absl::StrJoin(events, ","));
    return answer;
  }

  Answer List(const std::string& prefix, uint64_t page_size) {
    std::vector<std::string> names;
    std::string token;
    int pages = 0;
    // Bounded: a daemon that never ends the listing cannot hang the peer.
    for (; pages < 10000; ++pages) {
      v1::ListRequest request;
      request.set_prefix(prefix);
      request.set_page_size(static_cast<uint32_t>(page_size));
      request.set_page_token(token);
      v1::ListResponse response;
      grpc::Status status = stub_->List(Context().get(), request, &response);
      if (!status.ok()) return FromGrpc(status);
      for (const v1::TensorInfo& info : response.tensors()) names.push_back(info.name());
      token = response.next_page_token();
      if (token.empty()) break;
    }
    return Answer().Set("names", absl::StrJoin(names, ",")).Set("pages", std::to_string(pages + 1));
  }

  Answer Stats() {
    v1::StatsRequest request;
    v1::BrokerStats stats;
    Answer answer = FromGrpc(stub_->Stats(Context().get(), request, &stats));
    if (answer.code != 0) return answer;
    std::vector<std::string> users;
    for (const v1::UserUsage& user : stats.users()) {
      users.push_back(absl::StrCat(user.uid(), ":", user.bytes(), ":", user.tensors(), ":",
                                   user.quota_bytes(), ":", user.quota_tensors()));
    }
    return answer.Set("tensors", std::to_string(stats.tensors()))
        .Set("users", absl::StrJoin(users, ";"));
  }

  Answer Release(uint64_t lease) {
    v1::ReleaseRequest request;
    request.set_session_id(session_id_);
    request.set_lease_id(lease);
    v1::Empty empty;
    return FromGrpc(stub_->Release(Context().get(), request, &empty));
  }

  Answer Retain(uint64_t lease) {
    v1::RetainRequest request;
    request.set_session_id(session_id_);
    request.set_lease_id(lease);
    v1::TensorGrant grant;
    Answer answer = FromGrpc(stub_->Retain(Context().get(), request, &grant));
    if (answer.code == 0) AddGrant(grant, &answer);
    return answer;
  }

  // One request on the local channel and its reply (not an event: those are skipped).
  v1::LocalReply LocalCall(v1::LocalRequest request, std::vector<tensorbroker::UniqueFd>* fds) {
    request.set_request_id(++local_request_id_);
    if (!tensorbroker::SendMessage(local_.get(), request.SerializeAsString()).ok()) {
      Die("local channel: send");
    }
    while (true) {
      auto received = tensorbroker::ReceiveMessage(local_.get(), 1 << 16);
      if (!received.ok() || received->closed) Die("local channel: no reply");
      v1::LocalReply reply;
      if (!reply.ParseFromString(received->bytes)) Die("local channel: not a LocalReply");
      if (reply.request_id() != local_request_id_) continue;
      if (fds != nullptr) *fds = std::move(received->fds);
      return reply;
    }
  }

  static Answer FromLocal(const v1::LocalReply& reply) {
    Answer answer;
    answer.code = reply.code();
    answer.message = reply.message();
    return answer;
  }

  Answer LocalOpen() {
    local_.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    const std::string path = socket_path_ + ".fd";
    path.copy(address.sun_path, sizeof(address.sun_path) - 1);
    if (::connect(local_.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) !=
        0) {
      Die(absl::StrCat("connect ", path, ": ", std::strerror(errno)));
    }
    v1::LocalRequest request;
    request.mutable_open()->mutable_hello()->set_client_name("tenancy_peer");
    return FromLocal(LocalCall(request, nullptr));
  }

  static std::vector<std::string> Markers(const std::string& markers_hex) {
    std::vector<std::string> markers;
    for (absl::string_view hex : absl::StrSplit(markers_hex, ',')) {
      const bool valid = !hex.empty() && hex.size() % 2 == 0 &&
                         std::all_of(hex.begin(), hex.end(), absl::ascii_isxdigit);
      if (!valid) Die(absl::StrCat("not a hex marker: ", hex));
      markers.push_back(absl::HexStringToBytes(hex));
    }
    return markers;
  }

  static std::string FoundList(const std::vector<bool>& found) {
    return absl::StrJoin(found, ",", [](std::string* out, bool f) { out->append(f ? "1" : "0"); });
  }

  Answer LocalDirectory(const std::string& markers_hex) {
    const std::vector<std::string> markers = Markers(markers_hex);
    v1::LocalRequest request;
    request.mutable_open_fast_reads();
    std::vector<tensorbroker::UniqueFd> fds;
    const v1::LocalReply reply = LocalCall(request, &fds);
    Answer answer = FromLocal(reply);
    if (answer.code != 0) return answer;
    if (fds.size() != 2 || reply.descriptors_size() != 2) Die("open_fast_reads: not 2 descriptors");
    const uint64_t size = reply.descriptors(0).size();
    void* view = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fds[0].get(), 0);
    if (view == MAP_FAILED) Die(absl::StrCat("mmap: ", std::strerror(errno)));
    const std::string_view bytes(static_cast<const char*>(view), size);
    std::vector<bool> found(markers.size(), false);
    for (size_t m = 0; m < markers.size(); ++m) {
      found[m] = bytes.find(markers[m]) != std::string_view::npos;
    }
    directory_ = view;  // kept for local_pin's @NAME
    void* writable = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0].get(), 0);
    if (writable != MAP_FAILED) ::munmap(writable, size);
    table_size_ = reply.descriptors(1).size();
    table_ = ::mmap(nullptr, table_size_, PROT_READ | PROT_WRITE, MAP_SHARED, fds[1].get(), 0);
    if (table_ == MAP_FAILED) Die(absl::StrCat("mmap of the lease table: ", std::strerror(errno)));
    return answer.Set("descriptors", std::to_string(fds.size()))
        .Set("found", FoundList(found))
        .Set("directory_writable", writable == MAP_FAILED ? "0" : "1");
  }

  Answer LocalPin(const std::string& values) {
    if (table_ == nullptr) Die("local_pin before local_directory");
    auto* slots = reinterpret_cast<uint64_t*>(static_cast<char*>(table_) + 64);
    // As many as the header says the table has (the daemon scans no more).
    const size_t capacity =
        std::min<uint64_t>(__atomic_load_n(static_cast<uint64_t*>(table_) + 1, __ATOMIC_ACQUIRE),
                           (table_size_ - 64) / 8);
    const tensorbroker::DirectoryReader directory(directory_);
    for (absl::string_view value : absl::StrSplit(values, ',')) {
      if (pinned_ == capacity) break;
      const uint64_t raw = absl::ConsumePrefix(&value, "@") ? directory.Find(value).entry.object
                                                            : Number(std::string(value));
      __atomic_store_n(&slots[pinned_++], raw, __ATOMIC_SEQ_CST);
      // Counted as a client counts its takes (common/lease_slots.h): a table whose count has
      // not moved since the daemon saw it empty is not scanned.
      __atomic_fetch_add(static_cast<uint64_t*>(table_) + 2, 1, __ATOMIC_SEQ_CST);
    }
    return Answer().Set("pinned", std::to_string(pinned_));
  }

  Answer LocalGet(const std::string& name, const std::string& markers_hex) {
    const std::vector<std::string> markers = Markers(markers_hex);
    v1::LocalRequest request;
    request.mutable_get()->set_name(name);
    std::vector<tensorbroker::UniqueFd> fds;
    const v1::LocalReply reply = LocalCall(request, &fds);
    Answer answer = FromLocal(reply);
    if (answer.code != 0) return answer;
    std::vector<bool> found(markers.size(), false);
    bool writable = false;
    for (int i = 0; i < reply.descriptors_size() && i < static_cast<int>(fds.size()); ++i) {
      const v1::SegmentDescriptor& descriptor = reply.descriptors(i);
      writable = writable || descriptor.writable();
      void* view = ::mmap(nullptr, descriptor.size(), PROT_READ, MAP_SHARED, fds[i].get(), 0);
      if (view == MAP_FAILED) Die(absl::StrCat("mmap: ", std::strerror(errno)));
      const std::string_view bytes(static_cast<const char*>(view), descriptor.size());
      for (size_t m = 0; m < markers.size(); ++m) {
        found[m] = found[m] || bytes.find(markers[m]) != std::string_view::npos;
      }
      ::munmap(view, descriptor.size());
    }
    AddGrant(reply.grant(), &answer);
    return answer.Set("descriptors", std::to_string(fds.size()))
        .Set("writable", writable ? "1" : "0")
        .Set("found", FoundList(found));
  }

  // Cancel{request_id} for every id from 1 to `last` (no replies of their own), then a barrier:
  // its reply says the daemon has handled them all.
  Answer LocalCancelUpTo(uint64_t last) {
    for (uint64_t id = 1; id <= last; ++id) {
      v1::LocalRequest cancel;
      cancel.mutable_cancel()->set_request_id(id);
      if (!tensorbroker::SendMessage(local_.get(), cancel.SerializeAsString()).ok()) {
        Die("local channel: send");
      }
    }
    return FromLocal(LocalCall(v1::LocalRequest(), nullptr));
  }

  Answer LocalLeaseCall(const std::string& verb, uint64_t lease) {
    v1::LocalRequest request;
    if (verb == "local_retain") {
      request.mutable_retain()->set_lease_id(lease);
    } else if (verb == "local_fetch") {
      request.mutable_fetch_segment()->set_lease_id(lease);
    } else {
      request.add_release_lease_ids(lease);  // then no call: a barrier
    }
    std::vector<tensorbroker::UniqueFd> fds;
    const v1::LocalReply reply = LocalCall(request, &fds);
    Answer answer = FromLocal(reply);
    answer.Set("descriptors", std::to_string(fds.size()));
    if (answer.code == 0 && reply.has_grant()) AddGrant(reply.grant(), &answer);
    return answer;
  }

  const std::string socket_path_;
  std::unique_ptr<v1::Broker::Stub> stub_;
  grpc::ClientContext session_context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionEvent>> session_;
  std::string session_id_;
  tensorbroker::UniqueFd local_;
  uint64_t local_request_id_ = 0;
  void* table_ = nullptr;  // the lease table local_directory mapped (for local_pin); kept
  uint64_t table_size_ = 0;
  size_t pinned_ = 0;                // slots local_pin filled
  const void* directory_ = nullptr;  // local_directory's read-only mapping; kept
};

}  // namespace

int main(int argc, char** argv) {
  std::string socket_path;
  long uid = -1, gid = -1;
  std::vector<gid_t> groups;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--socket") socket_path = value;
    if (flag == "--uid") uid = std::atol(value.c_str());
    if (flag == "--gid") gid = std::atol(value.c_str());
    if (flag == "--groups" && value != "none") {
      for (absl::string_view g : absl::StrSplit(value, ',')) {
        groups.push_back(static_cast<gid_t>(Number(std::string(g))));
      }
    }
  }
  if (socket_path.empty() || uid < 0 || gid < 0) {
    Die("usage: --socket S --uid U --gid G [--groups G1,G2|none]");
  }
  if (::setgroups(groups.size(), groups.data()) != 0 ||
      ::setresgid(static_cast<gid_t>(gid), static_cast<gid_t>(gid), static_cast<gid_t>(gid)) != 0 ||
      ::setresuid(static_cast<uid_t>(uid), static_cast<uid_t>(uid), static_cast<uid_t>(uid)) != 0) {
    Die(absl::StrCat("dropping to uid ", uid, ": ", std::strerror(errno)));
  }
  Peer peer(socket_path);
  std::cout << "ready" << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (words.empty()) continue;
    std::cout << peer.Handle(words).Line() << std::endl;
  }
  return 0;
}
