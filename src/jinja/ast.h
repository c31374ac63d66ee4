// The parsed template: expression and statement nodes, as jinja2's parser builds them.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace pagoda::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct CallArgsExpr {
  std::vector<ExprPtr> pos;
  std::vector<std::pair<std::string, ExprPtr>> kw;
  ExprPtr star;       // *args
  ExprPtr star_star;  // **kwargs
};

enum class ExprKind {
  kConst,
  kName,
  kList,
  kTuple,
  kDict,
  kGetattr,
  kGetitem,
  kSlice,
  kCall,
  kFilter,
  kTest,
  kNot,
  kNeg,
  kPos,
  kBinary,
  kAnd,
  kOr,
  kConcat,
  kCompare,
  kCondExpr,
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;                 // kConst
  std::string name;            // kName, kGetattr attribute, kFilter/kTest name, kBinary op
  std::vector<ExprPtr> items;  // kList, kTuple, kConcat; kDict as key, value pairs
  ExprPtr a, b, c;             // operands: object/key, slice start/stop/step, cond parts
  CallArgsExpr args;           // kCall, kFilter, kTest
  std::vector<std::pair<std::string, ExprPtr>> ops;  // kCompare: (op, operand)
};

enum class StmtKind {
  kText,
  kPrint,
  kIf,
  kFor,
  kSet,
  kSetBlock,
  kMacro,
  kCallBlock,
  kFilterBlock,
  kWith,
  kBreak,
  kContinue,
  kGeneration,
};

// Where a {% set %} or loop stores: a name, a namespace attribute, or a tuple of names.
struct Target {
  enum class Kind { kName, kNsAttr, kTuple } kind = Kind::kName;
  std::string name;
  std::string attr;
  std::vector<Target> items;
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;  // kText data; kMacro name
  ExprPtr expr;      // kPrint value, kIf test, kFor iterable, kSet value, kCallBlock call
  ExprPtr filter;    // kFor loop filter; kSetBlock / kFilterBlock filter chain
  Target target;     // kFor, kSet, kSetBlock
  Body body;
  Body else_body;  // kIf else (elif chains nest as a single kIf), kFor else
  bool recursive = false;
  std::vector<MacroParam> params;                     // kMacro, kCallBlock
  std::vector<std::pair<Target, ExprPtr>> with_vars;  // kWith
  // Names the frame this statement opens (loop body, macro, with, filter or set block)
  // assigns directly; see annotate_frames.
  std::vector<std::string> declared;
};

}  // namespace pagoda::jinja
