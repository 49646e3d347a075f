// tensorbroker.StreamWriter and tensorbroker.StreamReader: stream rings (tensorbroker/stream.h)
// for Python. A loan and a frame are tensorbroker.Tensor objects over the ring's memory
// (writable for the writer's loan, read-only for a reader's frame); each keeps what it points
// into alive, so they stay valid after the writer, the reader or the client is gone.
// Threading: one Python thread per object at a time, except that close() may come from any
// thread (a reader's next() waiting meanwhile raises Cancelled); waits run with the GIL
// released (in slices on the main thread, so Ctrl-C interrupts them).
#ifndef TENSORBROKER_PYTHON_SRC_PY_STREAM_H_
#define TENSORBROKER_PYTHON_SRC_PY_STREAM_H_

#include <pybind11/pybind11.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "python/src/py_client.h"
#include "python/src/py_tensor.h"
#include "tensorbroker/client.h"
#include "tensorbroker/stream.h"

namespace tensorbroker::python {

class PyStreamWriter {
 public:
  PyStreamWriter(std::shared_ptr<Client> client, std::unique_ptr<StreamWriter> writer);
  ~PyStreamWriter();
  PyStreamWriter(const PyStreamWriter&) = delete;
  PyStreamWriter& operator=(const PyStreamWriter&) = delete;

  // The frame to fill next (StreamWriter::Loan), waiting up to `timeout` seconds.
  std::unique_ptr<PyTensor> Loan(double timeout);
  uint64_t Publish();
  void Close();
  size_t readers() const { return writer_->readers(); }
  const std::string& name() const { return writer_->name(); }

 private:
  std::shared_ptr<Client> client_;        // outlives writer_
  std::shared_ptr<StreamWriter> writer_;  // shared with every loan
};

class PyStreamReader {
 public:
  PyStreamReader(std::shared_ptr<Client> client, std::unique_ptr<StreamReader> reader,
                 std::string name);
  ~PyStreamReader();
  PyStreamReader(const PyStreamReader&) = delete;
  PyStreamReader& operator=(const PyStreamReader&) = delete;

  // The newest frame after the last one, or None when `timeout` seconds passed first (None:
  // wait for ever). StreamEnded (OUT_OF_RANGE) once the writer closed the stream and nothing newer
  // remains.
  pybind11::object Next(std::optional<double> timeout);
  // __next__: the next frame; StopIteration once the stream is closed.
  pybind11::object Iterate();
  void Close();
  uint64_t last_sequence() const { return last_sequence_; }
  uint64_t skipped() const { return skipped_; }
  const std::string& name() const { return name_; }

 private:
  std::unique_ptr<PyTensor> Wrap(StreamFrame frame);

  std::shared_ptr<Client> client_;  // outlives reader_
  // Null once closed; read and reset only with the GIL held. Shared with a next() waiting in
  // another thread, so a close() meanwhile never frees it under that wait: the waiter sees
  // closed_ at its next slice and lets go.
  std::shared_ptr<StreamReader> reader_;
  std::atomic<bool> closed_{false};  // set by close() from any thread; read by a waiting next()
  std::string name_;
  uint64_t last_sequence_ = 0;
  uint64_t skipped_ = 0;
};

// Client.stream_writer and Client.stream_reader.
std::unique_ptr<PyStreamWriter> OpenStreamWriter(PyClient& client, const std::string& name,
                                                 pybind11::handle shape, pybind11::handle dtype,
                                                 uint32_t slots, uint32_t max_readers,
                                                 uint32_t frames_per_reader,
                                                 pybind11::handle readers, bool replace);
std::unique_ptr<PyStreamReader> OpenStreamReader(PyClient& client, const std::string& name,
                                                 double timeout);

}  // namespace tensorbroker::python

#endif  // TENSORBROKER_PYTHON_SRC_PY_STREAM_H_
