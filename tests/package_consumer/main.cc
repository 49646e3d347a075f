// Puts a tensor, gets it back and checks every value: `consumer SOCKET` prints "ok" or why not.
#include <tensorbroker/client.h>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer SOCKET\n");
    return 2;
  }
  auto client = tensorbroker::Client::Connect(argv[1]);
  if (!client.ok()) {
    std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str());
    return 1;
  }
  std::vector<float> values = {1.5f, 2.5f, 3.5f};
  std::vector<int64_t> shape = {3};
  DLTensor source{};
  source.data = values.data();
  source.device = {kDLCPU, 0};
  source.ndim = 1;
  source.dtype = tensorbroker::dtypes::kFloat32;
  source.shape = shape.data();
  if (auto put = (*client)->Put("consumer/x", source); !put.ok()) {
    std::fprintf(stderr, "put: %s\n", put.status().ToString().c_str());
    return 1;
  }
  auto got = (*client)->Get("consumer/x");
  if (!got.ok()) {
    std::fprintf(stderr, "get: %s\n", got.status().ToString().c_str());
    return 1;
  }
  tensorbroker::TensorPtr tensor(*got);
  const float* data = static_cast<const float*>(tensor->dl_tensor.data);
  for (size_t i = 0; i < values.size(); ++i) {
    if (data[i] != values[i]) {
      std::fprintf(stderr, "value %zu: %g, expected %g\n", i, data[i], values[i]);
      return 1;
    }
  }
  std::printf("ok\n");
  return 0;
}
