// kolo::torch::zero::DistributedOptimizer; the algorithm is described in
// zero_optimizer.h, the layout (buckets, blocks, pieces) in docs/zero.md.
#include "frameworks/torch/zero_optimizer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <sstream>

#include "common/check.h"
#include "frameworks/torch/zero_ordered_reduce.h"
#include "frameworks/torch/zero_sharded_model.h"
#include "frameworks/torch/zero_stage3.h"

namespace kolo::torch::zero {
namespace {

using runtime::HandlePtr;
using runtime::OpKind;
using runtime::OpRequest;

// The next optimizer id (operation names carry it); the ranks agree on the
// largest proposal at construction.
std::atomic<int> nextId{0};

void waitAll(const std::vector<HandlePtr>& handles) {
  std::exception_ptr first;
  for (const auto& h : handles) {
    try {
      if (h) h->wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

std::string shapeText(const ::torch::Tensor& t) {
  std::vector<int64_t> s(t.sizes().begin(), t.sizes().end());
  return runtime::shapeString(s);
}

}  // namespace

DistributedOptimizer::DistributedOptimizer(::torch::optim::Optimizer& optimizer,
                                           NamedTensors namedParameters,
                                           std::shared_ptr<Context> context,
                                           Options options)
    : optimizer_(optimizer), context_(std::move(context)), options_(options) {
  KOLO_CHECK(context_ != nullptr);
  constexpr const char* kWhat = "kolo::torch::zero::DistributedOptimizer";
  if (options_.stage < 1 || options_.stage > 3) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               kWhat << ": stage must be 1, 2 or 3, got " << options_.stage);
  }
  if (options_.backwardPassesPerStep < 1 || !(options_.bucketMb > 0)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               kWhat << ": backwardPassesPerStep " << options_.backwardPassesPerStep
                     << " and bucketMb " << options_.bucketMb << " must be positive");
  }
  if (!optimizer_.state().empty()) {
    KOLO_THROW(
        ErrorCode::kInvalidArgument,
        kWhat << ": the optimizer already has state; wrap it before its first step");
  }
  std::map<const void*, std::string> names;
  for (auto& [name, t] : namedParameters) names[t.unsafeGetTensorImpl()] = name;
  for (auto& group : optimizer_.param_groups()) {
    for (auto& t : group.params()) {
      auto it = names.find(t.unsafeGetTensorImpl());
      if (it == names.end()) {
        KOLO_THROW(ErrorCode::kInvalidArgument,
                   kWhat << ": a parameter of the optimizer (shape " << shapeText(t)
                         << ") is not in namedParameters");
      }
      if (!t.requires_grad()) continue;
      if (!t.is_contiguous()) {
        KOLO_THROW(ErrorCode::kInvalidArgument,
                   kWhat << ": parameter '" << it->second << "' is not contiguous");
      }
      toKoloType(t.scalar_type(), "parameter '" + it->second + "'");
      Param p;
      p.name = it->second;
      p.tensor = t;
      params_.push_back(std::move(p));
    }
  }
  if (options_.stage == 3) {
    buildUnitBuckets();
  } else {
    buildBuckets(options_.bucketMb);
  }
  checkAgree();
  installPieces();
  if (options_.stage == 3) {
    stage3_ = std::make_unique<Stage3Reducer>(options_.sharded, id_,
                                              options_.backwardPassesPerStep);
  }
  if (options_.stage == 2) {
    for (size_t i = 0; i < params_.size(); ++i) {
      params_[i].hook = std::make_unique<GradientHook>(params_[i].tensor, [this, i] {
        std::lock_guard<std::mutex> lock(mu_);
        onGradient(i);
      });
    }
  }
}

DistributedOptimizer::~DistributedOptimizer() {
  stage3_.reset();
  std::vector<HandlePtr> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Param& p : params_) {
      p.hook.reset();
    }
    for (Bucket& b : buckets_) pending.push_back(b.handle);
  }
  try {
    waitAll(pending);
  } catch (...) {  // the buffers stay valid until here; errors were the caller's
  }
}

// "stage\tid" then "name\tdtype shape" lines, allgathered and compared with
// the first rank's.
void DistributedOptimizer::checkAgree() {
  std::ostringstream mine;
  mine << options_.stage << '\t' << nextId.load() << '\n';
  for (const Param& p : params_) {
    mine << p.name << '\t' << toString(toKoloType(p.tensor.scalar_type(), p.name)) << ' '
         << shapeText(p.tensor) << '\n';
  }
  const int size = context_->size();
  const auto all = allgatherStrings(context_->runtime(), "kolo.torch.zero.parameters",
                                    mine.str(), size);
  auto header = [](const std::string& text) {
    const size_t tab = text.find('\t'), nl = text.find('\n');
    return std::make_pair(std::stoi(text.substr(0, tab)),
                          std::stoi(text.substr(tab + 1, nl - tab - 1)));
  };
  const auto [stage0, id0] = header(all[0]);
  int id = id0;
  for (int r = 1; r < size; ++r) {
    const auto [stage, theirId] = header(all[static_cast<size_t>(r)]);
    id = std::max(id, theirId);
    if (stage != stage0) {
      KOLO_THROW_PEER(ErrorCode::kMismatch, r,
                      "kolo::torch::zero::DistributedOptimizer: stage "
                          << stage0 << " on rank 0 but stage " << stage << " on rank "
                          << r << "; every rank must use the same stage");
    }
    const std::string& a = all[0];
    const std::string& b = all[static_cast<size_t>(r)];
    if (a.substr(a.find('\n')) != b.substr(b.find('\n'))) {
      std::istringstream ia(a.substr(a.find('\n') + 1)), ib(b.substr(b.find('\n') + 1));
      std::string la, lb;
      while (true) {
        const bool ga = static_cast<bool>(std::getline(ia, la));
        const bool gb = static_cast<bool>(std::getline(ib, lb));
        if (!ga || !gb || la != lb) break;
      }
      KOLO_THROW_PEER(
          ErrorCode::kMismatch, r,
          "kolo::torch::zero::DistributedOptimizer: the models differ: rank 0 has '"
              << la << "' where rank " << r << " has '" << lb << "'");
    }
  }
  id_ = id;
  int expected = nextId.load();
  while (expected <= id && !nextId.compare_exchange_weak(expected, id + 1)) {
  }
}

void DistributedOptimizer::buildBuckets(double bucketMb) {
  const int64_t limit = static_cast<int64_t>(bucketMb * 1024 * 1024);
  const int64_t n = context_->size(), me = context_->rank();
  int64_t bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const ::torch::Tensor& t = params_[k].tensor;
    const int64_t nbytes = t.numel() * static_cast<int64_t>(t.element_size());
    if (buckets_.empty() || buckets_.back().dtype != t.scalar_type() ||
        (bytes + nbytes > limit && !buckets_.back().params.empty())) {
      buckets_.emplace_back();
      buckets_.back().dtype = t.scalar_type();
      bytes = 0;
    }
    Bucket& b = buckets_.back();
    params_[k].bucket = buckets_.size() - 1;
    b.params.push_back(k);
    b.offsets.push_back(b.total);
    b.total += t.numel();
    bytes += nbytes;
  }
  for (Bucket& b : buckets_) {
    b.shard = (b.total + n - 1) / n;
    b.begin = std::min(me * b.shard, b.total);
    b.end = std::min((me + 1) * b.shard, b.total);
    b.waiting = static_cast<int>(b.params.size());
  }
}

void DistributedOptimizer::installPieces() {
  std::map<const void*, size_t> groupOf;
  auto& groups = optimizer_.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (auto& t : groups[g].params()) groupOf[t.unsafeGetTensorImpl()] = g;
  }
  std::vector<std::vector<::torch::Tensor>> newParams(groups.size());
  for (Bucket& b : buckets_) {
    for (size_t i = 0; i < b.params.size(); ++i) {
      Param& p = params_[b.params[i]];
      const int64_t off = b.offsets[i], numel = p.tensor.numel();
      const int64_t lo = std::max(off, b.begin), hi = std::min(off + numel, b.end);
      if (lo >= hi) continue;
      Piece piece;
      piece.name = p.name;
      piece.param = p.tensor;
      piece.begin = lo - off;
      piece.end = hi - off;
      piece.view =
          options_.stage == 3
              ? options_.sharded->unit(b.unit).shard().narrow(0, lo - b.begin, hi - lo)
              : p.tensor.detach().view({-1}).narrow(0, piece.begin, hi - lo);
      newParams[groupOf.at(p.tensor.unsafeGetTensorImpl())].push_back(piece.view);
      b.pieces.push_back(pieces_.size());
      pieces_.push_back(std::move(piece));
    }
  }
  for (size_t g = 0; g < groups.size(); ++g) groups[g].params() = newParams[g];
}

void DistributedOptimizer::onGradient(size_t index) {
  Param& p = params_[index];
  synchronized_ = false;
  if (p.passes >= options_.backwardPassesPerStep) return;  // extra pass: at step
  if (++p.passes < options_.backwardPassesPerStep) return;
  Bucket& b = buckets_[p.bucket];
  if (--b.waiting == 0 && !b.handle) launch(b);
}

// The bucket's flat gradient (zeros where none), padded; its reduce-scatter
// (average) into `block`. Stage 2 releases the parameters' gradients.
// Under KOLO_DETERMINISTIC the reduce-scatter is the ordered one
// (zero_ordered_reduce.h), whose block synchronize() sums in rank order:
// the ordered allreduce's result on any number of ranks, where the
// runtime's reduce-scatter adds in a rank-dependent order.
void DistributedOptimizer::launch(Bucket& b) {
  const int64_t n = context_->size();
  std::vector<::torch::Tensor> parts;
  for (size_t k : b.params) {
    Param& p = params_[k];
    ::torch::Tensor g = p.tensor.grad();
    if (!g.defined()) {
      if (options_.stage == 1) {
        p.tensor.mutable_grad() = ::torch::zeros_like(p.tensor);
        g = p.tensor.grad();
      } else {
        g = ::torch::zeros_like(p.tensor);
      }
    }
    parts.push_back(g.reshape({-1}));
  }
  if (b.shard * n > b.total) {
    parts.push_back(::torch::zeros({b.shard * n - b.total}, parts[0].options()));
  }
  b.flat = ::torch::cat(parts);
  if (options_.stage == 2) {
    for (size_t k : b.params) params_[k].tensor.mutable_grad() = ::torch::Tensor();
  }
  const std::string name =
      "zero" + std::to_string(id_) + "/grad/" + std::to_string(&b - &buckets_[0]);
  if (context_->deterministic()) {  // the block is summed at synchronize()
    b.handle = startOrderedReduceScatter(context_->runtime(), name, b.flat, n);
    return;
  }
  b.block = ::torch::empty({b.shard}, b.flat.options());
  OpRequest r;
  r.spec.name = name;
  r.spec.kind = OpKind::kReduceScatter;
  r.spec.dtype = toKoloType(b.dtype, r.spec.name);
  r.spec.op = ReduceOp::kAverage;
  r.spec.shape = {b.shard * n};
  r.input = b.flat.data_ptr();
  r.output = b.block.data_ptr();
  b.handle = context_->runtime().enqueue(std::move(r));
}

void DistributedOptimizer::synchronize() {
  if (options_.stage == 3) return synchronizeUnits();
  std::vector<HandlePtr> handles;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (synchronized_) return;
    for (Bucket& b : buckets_) {
      if (!b.handle) launch(b);
      handles.push_back(b.handle);
    }
  }
  std::exception_ptr error;
  try {
    waitAll(handles);
  } catch (...) {
    error = std::current_exception();
  }
  std::lock_guard<std::mutex> lock(mu_);
  ::torch::NoGradGuard noGrad;
  for (Bucket& b : buckets_) {
    if (!error && context_->deterministic()) {
      b.block = finishOrderedReduceScatter(b.handle, b.dtype, b.shard, context_->size());
    }
    if (!error) installGradients(b);
    b.handle.reset();
    b.flat = ::torch::Tensor();
    b.waiting = static_cast<int>(b.params.size());
  }
  for (Param& p : params_) p.passes = 0;
  if (error) std::rethrow_exception(error);
  synchronized_ = true;
}

// Each piece's grad: its part of the bucket's averaged block (stage 1:
// copied into the owned slice of p.grad(), which the piece's grad then is).
void DistributedOptimizer::installGradients(Bucket& b) {
  for (size_t i = 0, k = 0; i < b.params.size(); ++i) {
    Param& p = params_[b.params[i]];
    const int64_t off = b.offsets[i];
    if (k >= b.pieces.size() || pieces_[b.pieces[k]].param.unsafeGetTensorImpl() !=
                                    p.tensor.unsafeGetTensorImpl()) {
      continue;
    }
    Piece& piece = pieces_[b.pieces[k++]];
    ::torch::Tensor part =
        b.block.narrow(0, off + piece.begin - b.begin, piece.end - piece.begin);
    if (options_.stage == 1) {
      ::torch::Tensor slot =
          p.tensor.grad().view({-1}).narrow(0, piece.begin, piece.end - piece.begin);
      slot.copy_(part);
      piece.view.mutable_grad() = slot;
    } else {
      piece.view.mutable_grad() = part;
    }
  }
}

void DistributedOptimizer::step() {
  synchronize();
  optimizer_.step();
  {
    std::lock_guard<std::mutex> lock(mu_);
    synchronized_ = false;
    for (Bucket& b : buckets_) b.block = ::torch::Tensor();
    for (Piece& piece : pieces_) piece.view.mutable_grad() = ::torch::Tensor();
  }
  // Stage 3: the shards are the parameters; the next forward gathers them.
  if (options_.stage == 3) return;
  allgatherParameters();
}

// Each bucket's owned elements (padded to a block) allgathered and copied
// into every rank's parameters.
void DistributedOptimizer::allgatherParameters() {
  ::torch::NoGradGuard noGrad;
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    Bucket& b = buckets_[bi];
    std::vector<::torch::Tensor> parts;
    for (size_t k : b.pieces) parts.push_back(pieces_[k].view);
    if (b.end - b.begin < b.shard) {
      parts.push_back(::torch::zeros({b.shard - (b.end - b.begin)},
                                     ::torch::TensorOptions().dtype(b.dtype)));
    }
    ::torch::Tensor mine = ::torch::cat(parts);
    OpRequest r;
    r.spec.name = "zero" + std::to_string(id_) + "/params/" + std::to_string(bi);
    r.spec.kind = OpKind::kAllgather;
    r.spec.dtype = toKoloType(b.dtype, r.spec.name);
    r.spec.shape = {b.shard};
    r.input = mine.data_ptr();
    HandlePtr h = context_->runtime().enqueue(std::move(r));
    h->wait();
    const auto& out = h->output();
    const size_t es = static_cast<size_t>(mine.element_size());
    KOLO_CHECK_EQ(out.size(), static_cast<size_t>(b.shard * context_->size()) * es);
    for (size_t i = 0; i < b.params.size(); ++i) {
      ::torch::Tensor dst = params_[b.params[i]].tensor.detach().view({-1});
      std::memcpy(dst.data_ptr(), out.data() + static_cast<size_t>(b.offsets[i]) * es,
                  static_cast<size_t>(dst.numel()) * es);
    }
  }
}

void DistributedOptimizer::zeroGrad() {
  if (stage3_) stage3_->reset();
  std::lock_guard<std::mutex> lock(mu_);
  synchronized_ = false;
  for (Piece& piece : pieces_) piece.view.mutable_grad() = ::torch::Tensor();
  for (Param& p : params_) {
    if (!p.tensor.grad().defined()) continue;
    if (options_.stage == 2) {
      p.tensor.mutable_grad() = ::torch::Tensor();
    } else {
      p.tensor.mutable_grad().detach_();
      p.tensor.mutable_grad().zero_();
    }
  }
}

double DistributedOptimizer::clipGradNorm(double maxNorm) {
  synchronize();
  double local = 0;
  for (Piece& piece : pieces_) {
    if (piece.view.grad().defined()) {
      local += piece.view.grad().to(::torch::kDouble).pow(2).sum().item<double>();
    }
  }
  OpRequest r;
  r.spec.name = "zero" + std::to_string(id_) + "/norm";
  r.spec.kind = OpKind::kAllreduce;
  r.spec.dtype = DataType::kFloat64;
  r.spec.op = ReduceOp::kSum;
  r.spec.shape = {1};
  r.input = r.output = &local;
  context_->runtime().enqueue(std::move(r))->wait();
  const double total = std::sqrt(local);
  const double coef = maxNorm / (total + 1e-6);
  if (coef < 1) {
    ::torch::NoGradGuard noGrad;
    for (Piece& piece : pieces_) {
      if (piece.view.grad().defined()) piece.view.mutable_grad().mul_(coef);
    }
  }
  return total;
}

// Stage 3: one bucket per unit of the wrapped model with trainable
// parameters, in the unit's layout; every trainable parameter of the
// optimizer must be in a unit and every trainable member of a unit in the
// optimizer.
void DistributedOptimizer::buildUnitBuckets() {
  constexpr const char* kWhat = "kolo::torch::zero::DistributedOptimizer";
  ShardedModel* model = options_.sharded.get();
  for (const Param& p : params_) {
    if (model == nullptr || model->unitOf(p.tensor) == nullptr) {
      KOLO_THROW(
          ErrorCode::kInvalidArgument,
          kWhat << ": stage 3 needs kolo::torch::zero::wrap(model) before the "
                   "optimizer is built (its result in Options::sharded); parameter '"
                << p.name << "' is not in a wrapped module");
    }
  }
  if (model == nullptr) {
    KOLO_THROW(
        ErrorCode::kInvalidArgument,
        kWhat << ": stage 3 needs kolo::torch::zero::wrap(model) and its result in "
                 "Options::sharded");
  }
  if (model->context() != context_) {
    KOLO_THROW(
        ErrorCode::kInvalidArgument,
        kWhat << ": the model was wrapped with another Context than the optimizer's");
  }
  std::map<const void*, size_t> index;
  for (size_t i = 0; i < params_.size(); ++i) {
    index[params_[i].tensor.unsafeGetTensorImpl()] = i;
  }
  for (size_t u = 0; u < model->unitCount(); ++u) {
    const Unit& unit = model->unit(u);
    Bucket b;
    b.unit = u;
    b.dtype = unit.dtype();
    b.total = unit.total();
    b.shard = unit.shardSize();
    b.begin = unit.begin();
    b.end = unit.end();
    for (const Unit::Member& m : unit.members()) {
      if (!m.param.requires_grad()) continue;
      auto it = index.find(m.param.unsafeGetTensorImpl());
      if (it == index.end()) {
        KOLO_THROW(ErrorCode::kInvalidArgument,
                   kWhat << ": parameter '" << m.name
                         << "' of the wrapped model is not in the optimizer; at stage 3 "
                            "give the optimizer every trainable parameter of the model");
      }
      params_[it->second].bucket = buckets_.size();
      b.params.push_back(it->second);
      b.offsets.push_back(m.offset);
    }
    if (!b.params.empty()) buckets_.push_back(std::move(b));
  }
}

// Stage 3: the units' reductions finished (Stage3Reducer), every unit
// released, the blocks into the pieces' grads.
void DistributedOptimizer::synchronizeUnits() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (synchronized_) return;
  }
  std::exception_ptr error;
  std::vector<::torch::Tensor> blocks;
  try {
    blocks = stage3_->finish();
  } catch (...) {
    error = std::current_exception();
  }
  try {
    options_.sharded->releaseAll();  // a prefetch backward did not use
  } catch (...) {
    if (!error) error = std::current_exception();
  }
  if (error) std::rethrow_exception(error);
  std::lock_guard<std::mutex> lock(mu_);
  ::torch::NoGradGuard noGrad;
  for (Bucket& b : buckets_) {
    b.block = blocks[b.unit];
    installGradients(b);
  }
  synchronized_ = true;
}

}  // namespace kolo::torch::zero
