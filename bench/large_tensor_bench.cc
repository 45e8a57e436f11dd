// Large tensors: put and fetch of float32 tensors (64 MiB, 1 GiB) through
// the C++ client (chunked transfer, client/src/chunks.cc) against a raw
// gRPC stub moving the same bytes in the same messages on the same kind of
// stream, both served by this process on loopback:
//
//   gradtape  Session::Put + Sync (PutTensorBegin, then one PutTensorChunk
//             per batch; the server copies each chunk into the tensor) and
//             Session::Fetch (chunks of chunk_mb, 4 in flight).
//   raw       a TapeService whose Stream does nothing but answer: a batch
//             holding a PutTensorChunk gets an empty reply (the bytes are
//             dropped), a FetchTensor gets a TensorChunk of max_bytes from a
//             buffer made once. The client writes the same chunk batches
//             (put) or keeps 4 chunk fetches in flight (fetch).
//
// Prints, per size and direction, the median of --reps runs in MB/s for
// both and the ratio of their times (gradtape / raw; 1.0 = as fast as the
// raw stub).
//
//   large_tensor_bench [--reps=5] [--chunk_mb=64] [--sizes_mb=64,1024]
//   large_tensor_bench --serve   (prints both addresses, serves until stdin
//                                 closes: bench/large_tensor_bench.py)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/src/session_core.h"
#include "gradtape/client/client.h"
#include "gradtape/v1/tape_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/server.h"

ABSL_FLAG(int, reps, 5, "runs per size and direction; medians are printed");
ABSL_FLAG(int64_t, chunk_mb, 64, "chunk size of both clients, MiB");
ABSL_FLAG(std::string, sizes_mb, "64,1024", "tensor sizes, MiB");
ABSL_FLAG(int, small_fetches, 20000,
          "also time this many fetches of a float32[4] (0: none): "
          "Session::Fetch (chunk-aware) against the plain FetchTensor call "
          "the client made before chunked transfer, alternating blocks");
ABSL_FLAG(bool, serve, false,
          "start both servers, print their addresses, serve until stdin "
          "closes (for bench/large_tensor_bench.py)");

namespace gradtape::bench {
namespace {

namespace v1 = gradtape::v1;
constexpr int kWindow = 4;
constexpr int kMaxMessage = 256 << 20;

// The raw baseline: answers chunk puts with an empty reply and chunk fetches
// with max_bytes of a buffer made once.
class RawService final : public v1::TapeService::Service {
 public:
  grpc::Status Stream(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::BatchReply, v1::CommandBatch>* stream)
      override {
    v1::CommandBatch batch;
    while (stream->Read(&batch)) {
      v1::BatchReply reply;
      reply.set_batch_id(batch.batch_id());
      for (const v1::Command& cmd : batch.commands()) {
        if (!cmd.has_fetch()) continue;
        const int64_t n = std::min<int64_t>(cmd.fetch().max_bytes(), kMaxBytes);
        v1::CommandResult* r = reply.add_results();
        r->set_seq(cmd.seq());
        r->mutable_chunk()->set_offset(cmd.fetch().offset());
        r->mutable_chunk()->set_data(source_.data(), static_cast<size_t>(n));
      }
      if (!stream->Write(reply)) break;
    }
    return grpc::Status::OK;
  }

 private:
  static constexpr int64_t kMaxBytes = int64_t{256} << 20;
  const std::string source_ = std::string(kMaxBytes, '\x7f');
};

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2]
                      : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Raw put: the same chunk batches the client sends, each answered.
double RawPut(v1::TapeService::Stub& stub, const std::string& bytes,
              int64_t chunk) {
  const auto start = std::chrono::steady_clock::now();
  grpc::ClientContext context;
  auto stream = stub.Stream(&context);
  int64_t batches = 0;
  for (int64_t at = 0; at < static_cast<int64_t>(bytes.size()); at += chunk) {
    v1::CommandBatch batch;
    batch.set_batch_id(++batches);
    v1::Command* c = batch.add_commands();
    c->set_seq(batches);
    c->mutable_put_chunk()->set_id(1);
    c->mutable_put_chunk()->set_offset(at);
    c->mutable_put_chunk()->set_data(bytes.substr(at, chunk));
    stream->Write(batch);
  }
  stream->WritesDone();
  v1::BatchReply reply;
  while (stream->Read(&reply)) {
  }
  stream->Finish();
  return Seconds(start);
}

// Raw fetch: chunk fetches kWindow at a time in flight, copied into place.
double RawFetch(v1::TapeService::Stub& stub, int64_t total, int64_t chunk) {
  const auto start = std::chrono::steady_clock::now();
  std::string out(static_cast<size_t>(total), '\0');
  grpc::ClientContext context;
  auto stream = stub.Stream(&context);
  int64_t next = 0, seq = 0, in_flight = 0;
  v1::BatchReply reply;
  while (next < total || in_flight > 0) {
    while (next < total && in_flight < kWindow) {
      v1::CommandBatch batch;
      batch.set_batch_id(++seq);
      v1::Command* c = batch.add_commands();
      c->set_seq(seq);
      c->mutable_fetch()->set_id(1);
      c->mutable_fetch()->set_offset(next);
      c->mutable_fetch()->set_max_bytes(std::min(chunk, total - next));
      stream->Write(batch);
      next += chunk;
      ++in_flight;
    }
    if (!stream->Read(&reply)) break;
    --in_flight;
    const v1::TensorChunk& part = reply.results(0).chunk();
    std::memcpy(out.data() + part.offset(), part.data().data(),
                part.data().size());
  }
  stream->WritesDone();
  stream->Finish();
  return Seconds(start);
}

client::HostTensor Floats(int64_t bytes) {
  client::HostTensor t;
  t.dtype = client::DType::kFloat32;
  t.shape = {bytes / 4};
  t.bytes.resize(static_cast<size_t>(bytes));
  float* f = reinterpret_cast<float*>(t.bytes.data());
  for (int64_t i = 0; i < bytes / 4; ++i) f[i] = static_cast<float>(i & 1023);
  return t;
}

// Microseconds per fetch of a float32[4], median of blocks of 1000:
// Session::Fetch (today's path) and the call the client made before
// chunked transfer (FetchTensor without max_bytes), alternated.
bool SmallFetches(client::Session& session, int n) {
  client::Tensor t = session.Put(Floats(16));
  auto chunk_aware = [&] { return session.Fetch(t).ok(); };
  auto plain = [&] {
    v1::Command command;
    command.mutable_fetch()->set_id(t.id());
    absl::StatusOr<v1::CommandResult> r = session.core()->Call(command);
    if (!r.ok() || !r->has_tensor()) return false;
    client::HostTensor value = client::internal::FromProto(r->mutable_tensor());
    return true;
  };
  std::vector<double> now, before;
  constexpr int kBlock = 200;
  // ABBA order, so that neither path always runs first.
  for (int done = 0, round = 0; done < n; done += kBlock, ++round) {
    for (int which = 0; which < 2; ++which) {
      const bool first_is_now = round % 2 == 0;
      const bool is_now = (which == 0) == first_is_now;
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < kBlock; ++i) {
        if (!(is_now ? chunk_aware() : plain())) return false;
      }
      (is_now ? now : before).push_back(Seconds(start) * 1e6 / kBlock);
    }
  }
  std::printf(
      "small fetch (float32[4], %d each): %.1f us with chunk-aware Fetch, "
      "%.1f us with the plain FetchTensor call, ratio %.3f (medians of "
      "blocks of %d, ABBA)\n",
      n, Median(now), Median(before), Median(now) / Median(before), kBlock);
  return true;
}

struct Servers {
  std::unique_ptr<server::Server> gradtape;
  RawService raw_service;
  std::unique_ptr<grpc::Server> raw;
  int raw_port = 0;
};

bool Start(Servers& s) {
  server::ServerOptions options;
  options.address = "127.0.0.1:0";
  options.max_message_bytes = kMaxMessage;
  absl::StatusOr<std::unique_ptr<server::Server>> g =
      server::Server::Start(options);
  if (!g.ok()) {
    std::fprintf(stderr, "gradtape server: %s\n",
                 g.status().ToString().c_str());
    return false;
  }
  s.gradtape = *std::move(g);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &s.raw_port);
  builder.SetMaxReceiveMessageSize(kMaxMessage);
  builder.SetMaxSendMessageSize(kMaxMessage);
  builder.RegisterService(&s.raw_service);
  s.raw = builder.BuildAndStart();
  return s.raw != nullptr;
}

int Run() {
  Servers servers;
  if (!Start(servers)) return 1;
  const std::string gradtape_address =
      absl::StrCat("127.0.0.1:", servers.gradtape->port());
  const std::string raw_address = absl::StrCat("127.0.0.1:", servers.raw_port);
  if (absl::GetFlag(FLAGS_serve)) {
    std::printf("gradtape %s raw %s\n", gradtape_address.c_str(),
                raw_address.c_str());
    std::fflush(stdout);
    std::string line;
    while (std::getline(std::cin, line)) {
    }
    return 0;
  }
  const int64_t chunk = absl::GetFlag(FLAGS_chunk_mb) << 20;
  const int reps = absl::GetFlag(FLAGS_reps);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  auto raw_stub = v1::TapeService::NewStub(grpc::CreateCustomChannel(
      raw_address, grpc::InsecureChannelCredentials(), args));
  client::SessionOptions options;
  options.chunk_bytes = chunk;
  absl::StatusOr<std::unique_ptr<client::Session>> session =
      client::Session::Connect(gradtape_address, options);
  if (!session.ok()) {
    std::fprintf(stderr, "%s\n", session.status().ToString().c_str());
    return 1;
  }
  if (const int n = absl::GetFlag(FLAGS_small_fetches);
      n > 0 && !SmallFetches(**session, n)) {
    std::fprintf(stderr, "small fetch failed\n");
    return 1;
  }
  std::printf(
      "large_tensor_bench: float32, chunks of %lld MiB, %d runs, "
      "medians (runs alternate gradtape and raw)\n",
      static_cast<long long>(chunk >> 20), reps);
  std::printf("%-6s %-6s %14s %14s %18s\n", "MiB", "op", "gradtape MB/s",
              "raw MB/s", "time ratio g/raw");
  for (absl::string_view size_text :
       absl::StrSplit(absl::GetFlag(FLAGS_sizes_mb), ',')) {
    int64_t mib = 0;
    if (!absl::SimpleAtoi(size_text, &mib) || mib <= 0) continue;
    const int64_t bytes = mib << 20;
    const client::HostTensor value = Floats(bytes);
    std::vector<double> gput, rput, gfetch, rfetch;
    for (int r = 0; r < reps; ++r) {
      auto start = std::chrono::steady_clock::now();
      client::Tensor t = (*session)->Put(value);
      absl::Status synced = (*session)->Sync();
      gput.push_back(Seconds(start));
      rput.push_back(RawPut(*raw_stub, value.bytes, chunk));
      start = std::chrono::steady_clock::now();
      absl::StatusOr<client::HostTensor> back = (*session)->Fetch(t);
      gfetch.push_back(Seconds(start));
      rfetch.push_back(RawFetch(*raw_stub, bytes, chunk));
      if (!synced.ok() || !back.ok() || back->bytes != value.bytes) {
        std::fprintf(stderr, "round trip failed: %s %s\n",
                     synced.ToString().c_str(),
                     back.status().ToString().c_str());
        return 1;
      }
    }
    const double mb = static_cast<double>(bytes) / 1e6;
    std::printf("%-6lld %-6s %14.0f %14.0f %18.2f\n",
                static_cast<long long>(mib), "put", mb / Median(gput),
                mb / Median(rput), Median(gput) / Median(rput));
    std::printf("%-6lld %-6s %14.0f %14.0f %18.2f\n",
                static_cast<long long>(mib), "fetch", mb / Median(gfetch),
                mb / Median(rfetch), Median(gfetch) / Median(rfetch));
    std::fflush(stdout);
  }
  return (*session)->Close().ok() ? 0 : 1;
}

}  // namespace
}  // namespace gradtape::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return gradtape::bench::Run();
}
