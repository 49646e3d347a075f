// tensorbroker.Client: a connection and session to tensorbrokerd, made by tensorbroker.connect().
// Tensors it returns keep working after close(): each holds a reference to its lease and the
// connection.
//
// Threading: safe to call from many Python threads; every broker round trip and every wait
// runs with the GIL released. On the main thread get() waits in slices so Ctrl-C
// (KeyboardInterrupt) interrupts it; on others a Cancellation (get(cancel=...)) does.
#ifndef TENSORBROKER_PYTHON_SRC_PY_CLIENT_H_
#define TENSORBROKER_PYTHON_SRC_PY_CLIENT_H_

#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>

#include "python/src/py_tensor.h"
#include "tensorbroker/client.h"

namespace tensorbroker::python {

class PyClient {
 public:
  // `socket`: None for the default (same rule as the C++ client and the CLI).
  static std::unique_ptr<PyClient> Connect(std::optional<std::string> socket, double timeout,
                                           double reconnect_timeout, bool fast_reads);
  ~PyClient();
  PyClient(const PyClient&) = delete;
  PyClient& operator=(const PyClient&) = delete;

  // `device`: None (where the object is), or a device spelling (py_device.h).
  // `readers`: None (the daemon's default), one string ("uid:1000,group:ml") or a sequence of
  // entries.
  // `keep`: versions of the name kept readable by number (CreateOptions::keep).
  pybind11::dict Put(const std::string& name, pybind11::handle object, bool is_mutable,
                     bool replace, pybind11::object device, pybind11::handle readers,
                     uint32_t keep);
  std::unique_ptr<PyTensor> Create(const std::string& name, pybind11::handle shape,
                                   pybind11::handle dtype, bool is_mutable, bool replace,
                                   pybind11::handle device, bool pinned, pybind11::handle readers,
                                   uint32_t keep);
  // Which version a Python get() asks for (GetOptions: version, after_version, oldest).
  struct VersionArgs {
    std::optional<uint64_t> version;
    std::optional<uint64_t> after_version;
    bool oldest = false;
  };
  // `timeout`: seconds to wait for the name to be published; None waits until it is.
  // `device`: None, or where the tensor must be (FAILED_PRECONDITION otherwise; no copy).
  // `cancel`: None or a tensorbroker.Cancellation (GetCancellation) that ends the wait.
  std::unique_ptr<PyTensor> Get(const std::string& name, std::optional<double> timeout, bool pinned,
                                pybind11::object device, pybind11::handle cancel,
                                const VersionArgs& which);
  void Delete(const std::string& name);
  pybind11::list List(const std::string& prefix);
  pybind11::dict Stat(const std::string& name);
  // From the directory, with the GIL held (a read of shared memory); a call otherwise.
  uint64_t LatestVersion(const std::string& name);
  bool ChangedSince(const std::string& name, uint64_t version);
  pybind11::dict Stats();
  // Client::Watch (for PyWatch).
  std::unique_ptr<Watcher> Watch(const std::string& prefix, std::optional<uint64_t> after_version);
  void Ping();

  std::string socket() const { return socket_; }
  // The live client, or FAILED_PRECONDITION after close() (for streams).
  std::shared_ptr<Client> Shared() const { return Live(); }
  bool closed() const { return client_ == nullptr; }
  void Close();

 private:
  PyClient(std::shared_ptr<Client> client, std::string socket)
      : client_(std::move(client)), socket_(std::move(socket)) {}
  // The live client, or FAILED_PRECONDITION after close().
  std::shared_ptr<Client> Live() const;
  // A Python tensor over a tensor `client` returned.
  static std::unique_ptr<PyTensor> Wrap(const std::shared_ptr<Client>& client,
                                        DLManagedTensorVersioned* got);

  std::shared_ptr<Client> client_;
  std::string socket_;
};

// A shape given from Python (a sequence of non-negative ints).
std::vector<int64_t> ShapeFromPython(pybind11::handle shape);
// None: the daemon's default readers; "a,b" or an iterable of entries (CreateOptions::readers).
std::vector<std::string> ReadersFromPython(pybind11::handle readers);

// The same fields and spellings as `tensorbroker stat --json` / `stats --json`.
pybind11::dict InfoDict(const TensorInfo& info);
pybind11::dict StatsDict(const BrokerStats& stats);

}  // namespace tensorbroker::python

#endif  // TENSORBROKER_PYTHON_SRC_PY_CLIENT_H_
