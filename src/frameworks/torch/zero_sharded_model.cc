// kolo::torch::zero::wrap, ShardedModule and the autograd Function that
// gathers a unit for its backward; the algorithm is described in
// zero_sharded_model.h.
#include "frameworks/torch/zero_sharded_model.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <set>
#include <sstream>

#include "common/check.h"
#include "frameworks/torch/distributed_optimizer.h"

namespace kolo::torch::zero {
namespace {

constexpr const char* kWrap = "kolo::torch::zero::wrap";

// The next model id (operation names carry it); the ranks agree on the
// largest proposal in wrap().
std::atomic<int> nextModelId{0};

// What UnitFunction keeps from forward to backward: the module's own
// graph (its detached input and its output) and where to report.
struct Ticket : ::torch::CustomClassHolder {
  std::shared_ptr<ShardedModel> model;
  ::torch::nn::AnyModule module;
  size_t unit = 0;
  ::torch::Tensor input, output;
};

class UnitFunction : public ::torch::autograd::Function<UnitFunction> {
 public:
  // Runs the module (its unit gathered by the caller) with autograd on, on
  // a detached input: the module's graph stays in the ticket.
  static ::torch::Tensor forward(::torch::autograd::AutogradContext* ctx,
                                 const ::torch::Tensor& input,
                                 const ::torch::Tensor& anchor,
                                 c10::intrusive_ptr<Ticket> ticket) {
    (void)anchor;
    ::torch::AutoGradMode enable(true);
    ticket->input = input.detach();
    if (input.requires_grad()) ticket->input.requires_grad_(true);
    ticket->output = ticket->module.forward(ticket->input);
    if (!ticket->output.defined()) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 kWrap << ": a wrapped module returned no tensor (unit "
                       << ticket->model->unit(ticket->unit).module() << ")");
    }
    ::torch::Tensor out = ticket->output.variable_data();
    ctx->saved_data["ticket"] = c10::IValue::make_capsule(std::move(ticket));
    return out;
  }

  // Gathers the unit, runs the module's graph backward, hands the flat
  // parameter gradient to the sink, releases the unit.
  static ::torch::autograd::variable_list backward(
      ::torch::autograd::AutogradContext* ctx, ::torch::autograd::variable_list grads) {
    auto found = ctx->saved_data.find("ticket");
    if (found == ctx->saved_data.end()) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 "kolo::torch::zero: a second backward through a wrapped module "
                 "(retain_graph) is not supported");
    }
    auto ticket = c10::static_intrusive_pointer_cast<Ticket>(found->second.toCapsule());
    ctx->saved_data.erase(found);
    ShardedModel& model = *ticket->model;
    Unit& unit = model.unit(ticket->unit);
    model.beforeBackward(ticket->unit);
    std::vector<::torch::Tensor> inputs;
    const bool wantInput = ticket->input.requires_grad();
    if (wantInput) inputs.push_back(ticket->input);
    std::vector<const Unit::Member*> trainable;
    for (const Unit::Member& m : unit.members()) {
      if (m.param.requires_grad()) {
        inputs.push_back(m.param);
        trainable.push_back(&m);
      }
    }
    ::torch::autograd::variable_list g;
    if (!inputs.empty() && ticket->output.requires_grad()) {
      g = ::torch::autograd::grad({ticket->output}, inputs, {grads[0]},
                                  /*retain_graph=*/false, /*create_graph=*/false,
                                  /*allow_unused=*/true);
    } else {
      g.resize(inputs.size());
    }
    ticket->output = ::torch::Tensor();
    ticket->input = ::torch::Tensor();
    ::torch::Tensor flat =
        ::torch::zeros({unit.padded()}, ::torch::TensorOptions().dtype(unit.dtype()));
    {
      ::torch::NoGradGuard noGrad;
      const size_t first = wantInput ? 1 : 0;
      for (size_t k = 0; k < trainable.size(); ++k) {
        const ::torch::Tensor& gk = g[first + k];
        if (gk.defined()) {
          flat.narrow(0, trainable[k]->offset, trainable[k]->numel)
              .copy_(gk.reshape({-1}));
        }
      }
    }
    model.afterBackward(ticket->unit, std::move(flat));
    return {wantInput ? g[0] : ::torch::Tensor(), ::torch::Tensor(), ::torch::Tensor()};
  }
};

std::string shapeText(const ::torch::Tensor& t) {
  std::vector<int64_t> s(t.sizes().begin(), t.sizes().end());
  return runtime::shapeString(s);
}

// One child of the Sequential that owns parameters.
struct Planned {
  std::string name;
  ::torch::nn::AnyModule module;
  std::vector<std::pair<std::string, ::torch::Tensor>> params;
};

// Every rank's "id\n" then "name\tdtype shape" lines, compared with rank
// 0's; returns the agreed id (the largest proposal).
int agreeOnModel(Context& context, const std::vector<Planned>& plan) {
  std::ostringstream mine;
  mine << nextModelId.load() << '\n';
  for (const Planned& p : plan) {
    for (const auto& [name, t] : p.params) {
      mine << name << '\t' << toString(toKoloType(t.scalar_type(), name)) << ' '
           << shapeText(t) << '\n';
    }
  }
  const auto all = allgatherStrings(context.runtime(), "kolo.torch.zero.wrap", mine.str(),
                                    context.size());
  auto body = [](const std::string& s) { return s.substr(s.find('\n') + 1); };
  int id = 0;
  for (int r = 0; r < context.size(); ++r) {
    const std::string& text = all[static_cast<size_t>(r)];
    id = std::max(id, std::stoi(text.substr(0, text.find('\n'))));
    if (body(text) == body(all[0])) continue;
    std::istringstream ia(body(all[0])), ib(body(text));
    std::string la, lb;
    while (std::getline(ia, la) && std::getline(ib, lb) && la == lb) {
    }
    KOLO_THROW_PEER(ErrorCode::kMismatch, r,
                    kWrap << ": the models differ: rank 0 has '" << la << "' where rank "
                          << r << " has '" << lb << "'");
  }
  int expected = nextModelId.load();
  while (expected <= id && !nextModelId.compare_exchange_weak(expected, id + 1)) {
  }
  return id;
}

}  // namespace

ShardedModel::ShardedModel(std::shared_ptr<Context> context)
    : context_(std::move(context)) {
  KOLO_CHECK(context_ != nullptr);
}

Unit* ShardedModel::unitOf(const ::torch::Tensor& param, size_t* index) {
  for (size_t u = 0; u < units_.size(); ++u) {
    for (const Unit::Member& m : units_[u]->members()) {
      if (m.param.unsafeGetTensorImpl() == param.unsafeGetTensorImpl()) {
        if (index) *index = u;
        return units_[u].get();
      }
    }
  }
  return nullptr;
}

void ShardedModel::attach(GradientSink* sink) {
  std::lock_guard<std::mutex> lock(mu_);
  if (sink_ != nullptr && sink_ != sink) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "kolo::torch::zero: the wrapped model already has a stage-3 optimizer; "
               "build one DistributedOptimizer on all of its parameters");
  }
  sink_ = sink;
}

void ShardedModel::detach(GradientSink* sink) {
  std::lock_guard<std::mutex> lock(mu_);
  if (sink_ == sink) sink_ = nullptr;
}

size_t ShardedModel::addUnit(std::unique_ptr<Unit> unit) {
  units_.push_back(std::move(unit));
  return units_.size() - 1;
}

int ShardedModel::gatheredNow() const {
  int n = 0;
  for (const auto& u : units_) n += (u->gathered() || u->pending()) ? 1 : 0;
  return n;
}

void ShardedModel::notePeak() {
  peak_ = std::max(peak_, gatheredNow());
}

int64_t ShardedModel::heldBytes() const {
  int64_t bytes = 0;
  for (const auto& u : units_) {
    bytes += u->heldBytes() +
             u->shard().numel() * static_cast<int64_t>(u->shard().element_size());
  }
  return bytes;
}

void ShardedModel::beforeForward(size_t u) {
  units_[u]->gather();
  if (u + 1 < units_.size() && !units_[u + 1]->gathered() && !units_[u + 1]->pending()) {
    units_[u + 1]->startGather();
    ++prefetches_;
  }
  notePeak();
}

void ShardedModel::afterForward(size_t u) {
  units_[u]->release();
}

void ShardedModel::beforeBackward(size_t u) {
  units_[u]->gather();
  if (u > 0 && !units_[u - 1]->gathered() && !units_[u - 1]->pending()) {
    units_[u - 1]->startGather();
    ++prefetches_;
  }
  notePeak();
}

void ShardedModel::afterBackward(size_t u, ::torch::Tensor flatGrad) {
  units_[u]->release();
  if (!units_[u]->trainable()) return;
  GradientSink* sink;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sink = sink_;
  }
  if (sink == nullptr) {
    releaseAll();  // the prefetch of the previous unit too
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "kolo::torch::zero: backward through wrapped module '"
                   << units_[u]->module()
                   << "' needs a stage-3 DistributedOptimizer on the model's parameters "
                      "(Options::stage = 3, Options::sharded = wrap()'s result)");
  }
  sink->unitGradient(u, std::move(flatGrad));
}

void ShardedModel::releaseAll() {
  for (auto& u : units_) u->release();
}

ShardedModuleImpl::ShardedModuleImpl(::torch::nn::AnyModule inner,
                                     std::shared_ptr<ShardedModel> model, size_t unit)
    : inner_(std::move(inner)), model_(std::move(model)), unit_(unit) {
  const auto ptr = inner_.ptr();
  for (const auto& item : ptr->named_parameters(/*recurse=*/false)) {
    register_parameter(item.key(), item.value(), item.value().requires_grad());
  }
  for (const auto& item : ptr->named_buffers(/*recurse=*/false)) {
    register_buffer(item.key(), item.value());
  }
  for (const auto& item : ptr->named_children())
    register_module(item.key(), item.value());
  anchor_ =
      ::torch::empty({0}, ::torch::TensorOptions().dtype(model_->unit(unit).dtype()))
          .requires_grad_(true);
}

::torch::Tensor ShardedModuleImpl::forward(const ::torch::Tensor& input) {
  model_->beforeForward(unit_);
  ::torch::Tensor out;
  try {
    if (::torch::GradMode::is_enabled()) {
      auto ticket = c10::make_intrusive<Ticket>();
      ticket->model = model_;
      ticket->module = inner_;
      ticket->unit = unit_;
      out = UnitFunction::apply(input, anchor_, std::move(ticket));
    } else {
      out = inner_.forward(input);
    }
  } catch (...) {
    model_->afterForward(unit_);
    throw;
  }
  model_->afterForward(unit_);
  return out;
}

std::shared_ptr<ShardedModel> wrap(::torch::nn::Sequential& model,
                                   std::shared_ptr<Context> context) {
  KOLO_CHECK(context != nullptr);
  std::vector<Planned> plan;
  std::vector<std::pair<std::string, ::torch::nn::AnyModule>> children;
  std::map<const void*, std::string> owner;
  std::set<const void*> modules;
  const auto named = model->named_children();
  for (size_t i = 0; i < model->size(); ++i) {
    const std::string& name = named[i].key();
    ::torch::nn::AnyModule any = *(model->begin() + static_cast<std::ptrdiff_t>(i));
    if (std::dynamic_pointer_cast<ShardedModuleImpl>(any.ptr())) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 kWrap << ": child '" << name << "' is already wrapped");
    }
    if (!modules.insert(any.ptr().get()).second) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 kWrap << ": child '" << name << "' is a module that appears twice; "
                       << "each wrapped module must appear once");
    }
    children.emplace_back(name, any);
    Planned p{name, any, {}};
    for (const auto& item : any.ptr()->named_parameters(/*recurse=*/true)) {
      const std::string full = name + "." + item.key();
      auto [it, fresh] = owner.emplace(item.value().unsafeGetTensorImpl(), full);
      if (!fresh) {
        KOLO_THROW(ErrorCode::kInvalidArgument,
                   kWrap << ": parameter '" << full << "' is shared with '" << it->second
                         << "'; shared parameters are not supported at stage 3");
      }
      p.params.emplace_back(full, item.value());
    }
    if (!p.params.empty()) plan.push_back(std::move(p));
  }
  auto sharded = std::make_shared<ShardedModel>(context);
  sharded->setId(agreeOnModel(*context, plan));
  ::torch::nn::Sequential rebuilt;
  size_t next = 0;
  for (auto& [name, any] : children) {
    if (next < plan.size() && plan[next].name == name) {
      auto unit = std::make_unique<Unit>(name, std::move(plan[next].params), context);
      const size_t index = sharded->addUnit(std::move(unit));
      sharded->unit(index).setOpName("zero3." + std::to_string(sharded->id()) +
                                     "/gather/" + std::to_string(index));
      rebuilt->push_back(name,
                         ::torch::nn::AnyModule(ShardedModule(any, sharded, index)));
      ++next;
    } else {
      rebuilt->push_back(name, any);
    }
  }
  model = rebuilt;
  return sharded;
}

FullParameters::FullParameters(ShardedModel& model, bool writeBack)
    : model_(model), writeBack_(writeBack) {
  for (size_t u = 0; u < model_.unitCount(); ++u) {
    model_.unit(u).gather();
    model_.unit(u).setPinned(true);
  }
}

FullParameters::~FullParameters() {
  for (size_t u = 0; u < model_.unitCount(); ++u) {
    Unit& unit = model_.unit(u);
    if (writeBack_) unit.writeBack();
    unit.setPinned(false);
    unit.release();
  }
}

}  // namespace kolo::torch::zero
