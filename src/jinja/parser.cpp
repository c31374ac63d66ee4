#include "jinja/parser.h"

#include <initializer_list>

#include "jinja/error.h"
#include "jinja/lexer.h"

namespace pagoda::jinja {
namespace {

std::string describe(const Token& t) {
  switch (t.type) {
    case Tok::kData:
      return "template data / text";
    case Tok::kBlockBegin:
      return "begin of statement block";
    case Tok::kBlockEnd:
      return "end of statement block";
    case Tok::kVarBegin:
      return "begin of print statement";
    case Tok::kVarEnd:
      return "end of print statement";
    case Tok::kEof:
      return "end of template";
    case Tok::kString:
      return "string";
    case Tok::kInt:
      return "integer";
    case Tok::kFloat:
      return "float";
    default:
      return t.text;
  }
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Body parse() {
    Body body = subparse({});
    if (cur().type != Tok::kEof) fail("unexpected '" + describe(cur()) + "'");
    return body;
  }

 private:
  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p_(p) {
      if (++p_->depth_ > kMaxParseDepth)
        p_->fail("template nesting is too deep (limit " + std::to_string(kMaxParseDepth) + ")");
    }
    ~DepthGuard() { --p_->depth_; }
    Parser* p_;
  };
  // Loops that wrap the node they built (a + b + c, x|f|g, a.b.c) deepen the tree without
  // recursing; they count against the same limit so the tree stays shallow.
  struct ChainGuard {
    explicit ChainGuard(Parser* p) : p_(p) {}
    void add() {
      ++n_;
      if (++p_->depth_ > kMaxParseDepth)
        p_->fail("template nesting is too deep (limit " + std::to_string(kMaxParseDepth) + ")");
    }
    ~ChainGuard() { p_->depth_ -= n_; }
    Parser* p_;
    int n_ = 0;
  };

  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t n = 1) const { return t_[std::min(i_ + n, t_.size() - 1)]; }
  const Token& next() {
    const Token& t = t_[i_];
    if (i_ + 1 < t_.size()) ++i_;
    return t;
  }
  bool is_op(const char* op) const { return cur().type == Tok::kOp && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == Tok::kName && cur().text == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  [[noreturn]] void fail(const std::string& message, int line = 0) const {
    throw TemplateError(ErrorKind::kSyntax, message, line ? line : cur().line);
  }
  void expect_op(const char* op) {
    if (!skip_op(op))
      fail(std::string("expected token '") + op + "', got '" + describe(cur()) + "'");
  }
  void expect_name(const char* name) {
    if (!skip_name(name))
      fail(std::string("expected token '") + name + "', got '" + describe(cur()) + "'");
  }
  std::string expect_any_name() {
    if (cur().type != Tok::kName) fail("expected token 'name', got '" + describe(cur()) + "'");
    return next().text;
  }
  void expect(Tok type, const char* what) {
    if (cur().type != type)
      fail(std::string("expected token '") + what + "', got '" + describe(cur()) + "'");
    next();
  }

  ExprPtr node(ExprKind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  // ---- statements ----------------------------------------------------------------------

  Body subparse(std::initializer_list<const char*> end_tokens) {
    Body body;
    while (cur().type != Tok::kEof) {
      const Token& tok = cur();
      if (tok.type == Tok::kData) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kText;
        s->line = tok.line;
        s->text = tok.text;
        body.push_back(std::move(s));
        next();
      } else if (tok.type == Tok::kVarBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kPrint;
        s->line = cur().line;
        s->expr = parse_tuple(false, true, {}, false);
        body.push_back(std::move(s));
        expect(Tok::kVarEnd, "end of print statement");
      } else if (tok.type == Tok::kBlockBegin) {
        next();
        for (const char* e : end_tokens)
          if (is_name(e)) return body;
        parse_statement(&body);
        expect(Tok::kBlockEnd, "end of statement block");
      } else {
        fail("unexpected '" + describe(tok) + "'");
      }
    }
    return body;
  }

  Body parse_statements(std::initializer_list<const char*> end_tokens, bool drop_needle) {
    skip_op(":");
    expect(Tok::kBlockEnd, "end of statement block");
    Body body = subparse(end_tokens);
    if (cur().type == Tok::kEof) {
      std::string want;
      for (const char* e : end_tokens) want += std::string(want.empty() ? "'" : " or '") + e + "'";
      fail("Unexpected end of template. Jinja was looking for the following tags: " + want + ".");
    }
    if (drop_needle) next();
    return body;
  }

  StmtPtr stmt(StmtKind k, int line) {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    s->line = line;
    return s;
  }

  void parse_statement(Body* out) {
    DepthGuard guard(this);
    const Token& tok = cur();
    if (tok.type != Tok::kName) fail("tag name expected");
    const std::string name = tok.text;
    const int line = tok.line;
    if (name == "if") return out->push_back(parse_if());
    if (name == "for") return out->push_back(parse_for());
    if (name == "set") return out->push_back(parse_set());
    if (name == "macro") return out->push_back(parse_macro());
    if (name == "call") return out->push_back(parse_call_block());
    if (name == "filter") {
      next();
      auto s = stmt(StmtKind::kFilterBlock, line);
      s->filter = parse_filter(nullptr, true);
      s->body = parse_statements({"endfilter"}, true);
      return out->push_back(std::move(s));
    }
    if (name == "with") return out->push_back(parse_with());
    if (name == "break" || name == "continue") {
      next();
      return out->push_back(stmt(name == "break" ? StmtKind::kBreak : StmtKind::kContinue, line));
    }
    if (name == "generation") {
      // Hugging Face's extension: marks the assistant's tokens; renders its body.
      next();
      auto s = stmt(StmtKind::kGeneration, line);
      s->body = parse_statements({"endgeneration"}, true);
      return out->push_back(std::move(s));
    }
    if (name == "print") {
      next();
      bool first = true;
      while (cur().type != Tok::kBlockEnd) {
        if (!first) expect_op(",");
        first = false;
        auto s = stmt(StmtKind::kPrint, line);
        s->expr = parse_expression(true);
        out->push_back(std::move(s));
      }
      return;
    }
    if (name == "extends" || name == "include" || name == "import" || name == "from" ||
        name == "block")
      throw TemplateError(ErrorKind::kUnsupported,
                          "'{% " + name +
                              " %}' is not supported: chat templates are a single "
                              "template with no loader",
                          line);
    if (name == "autoescape")
      throw TemplateError(ErrorKind::kUnsupported, "'{% autoescape %}' is not supported", line);
    fail("Encountered unknown tag '" + name + "'.");
  }

  StmtPtr parse_if() {
    auto s = stmt(StmtKind::kIf, cur().line);
    next();
    s->expr = parse_tuple(false, false, {}, false);
    s->body = parse_statements({"elif", "else", "endif"}, false);
    const Token& t = next();
    if (t.text == "elif") {
      DepthGuard guard(this);
      s->else_body.push_back(parse_if_after_elif(t.line));
    } else if (t.text == "else") {
      s->else_body = parse_statements({"endif"}, true);
    }
    return s;
  }
  StmtPtr parse_if_after_elif(int line) {
    auto s = stmt(StmtKind::kIf, line);
    s->expr = parse_tuple(false, false, {}, false);
    s->body = parse_statements({"elif", "else", "endif"}, false);
    const Token& t = next();
    if (t.text == "elif") {
      DepthGuard guard(this);
      s->else_body.push_back(parse_if_after_elif(t.line));
    } else if (t.text == "else") {
      s->else_body = parse_statements({"endif"}, true);
    }
    return s;
  }

  Target parse_target(bool with_namespace, std::initializer_list<const char*> extra_end) {
    // A name, a namespace attribute (set only) or a tuple of them.
    std::vector<Target> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (tuple_end(extra_end)) break;
      Target t;
      if (cur().type != Tok::kName) fail("can't assign to '" + describe(cur()) + "'");
      std::string n = next().text;
      if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None")
        fail("can't assign to 'const'");
      t.name = n;
      if (with_namespace && is_op(".")) {
        next();
        t.kind = Target::Kind::kNsAttr;
        t.attr = expect_any_name();
      }
      items.push_back(std::move(t));
      if (is_op(","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (items.empty()) fail("Expected an expression, got '" + describe(cur()) + "'");
      return std::move(items[0]);
    }
    Target t;
    t.kind = Target::Kind::kTuple;
    t.items = std::move(items);
    return t;
  }

  StmtPtr parse_for() {
    auto s = stmt(StmtKind::kFor, cur().line);
    next();
    s->target = parse_target(false, {"in"});
    expect_name("in");
    s->expr = parse_tuple(false, false, {"recursive"}, false);
    if (skip_name("if")) s->filter = parse_expression(true);
    s->recursive = skip_name("recursive");
    if (s->recursive)
      throw TemplateError(ErrorKind::kUnsupported, "recursive for loops are not supported",
                          s->line);
    s->body = parse_statements({"endfor", "else"}, false);
    if (next().text == "else") s->else_body = parse_statements({"endfor"}, true);
    return s;
  }

  StmtPtr parse_set() {
    int line = cur().line;
    next();
    Target target = parse_target(true, {});
    if (skip_op("=")) {
      auto s = stmt(StmtKind::kSet, line);
      s->target = std::move(target);
      s->expr = parse_tuple(false, true, {}, false);
      return s;
    }
    auto s = stmt(StmtKind::kSetBlock, line);
    s->target = std::move(target);
    if (is_op("|")) s->filter = parse_filter(nullptr, false);
    s->body = parse_statements({"endset"}, true);
    return s;
  }

  void parse_signature(std::vector<MacroParam>* params) {
    expect_op("(");
    bool defaults = false;
    while (!is_op(")")) {
      if (!params->empty()) expect_op(",");
      MacroParam p;
      p.name = expect_any_name();
      if (skip_op("=")) {
        p.default_value = parse_expression(true);
        defaults = true;
      } else if (defaults) {
        fail("non-default argument follows default argument");
      }
      params->push_back(std::move(p));
    }
    expect_op(")");
  }

  StmtPtr parse_macro() {
    auto s = stmt(StmtKind::kMacro, cur().line);
    next();
    s->text = expect_any_name();
    parse_signature(&s->params);
    s->body = parse_statements({"endmacro"}, true);
    return s;
  }

  StmtPtr parse_call_block() {
    auto s = stmt(StmtKind::kCallBlock, cur().line);
    next();
    if (is_op("(")) parse_signature(&s->params);
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::kCall) fail("expected call", s->line);
    s->body = parse_statements({"endcall"}, true);
    return s;
  }

  StmtPtr parse_with() {
    auto s = stmt(StmtKind::kWith, cur().line);
    next();
    while (cur().type != Tok::kBlockEnd) {
      if (!s->with_vars.empty()) expect_op(",");
      Target t = parse_target(false, {});
      expect_op("=");
      s->with_vars.emplace_back(std::move(t), parse_expression(true));
    }
    s->body = parse_statements({"endwith"}, true);
    return s;
  }

  // ---- expressions ---------------------------------------------------------------------

  bool tuple_end(std::initializer_list<const char*> extra_end) const {
    if (cur().type == Tok::kVarEnd || cur().type == Tok::kBlockEnd || is_op(")")) return true;
    for (const char* e : extra_end)
      if (is_name(e)) return true;
    return false;
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr,
                      std::initializer_list<const char*> extra_end, bool explicit_parens) {
    int line = cur().line;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (tuple_end(extra_end)) break;
      args.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
      if (is_op(","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) fail("Expected an expression, got '" + describe(cur()) + "'");
    }
    auto e = node(ExprKind::kTuple, line);
    e->items = std::move(args);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    int line = cur().line;
    ExprPtr expr1 = parse_or();
    ChainGuard chain(this);
    while (skip_name("if")) {
      chain.add();
      auto e = node(ExprKind::kCondExpr, line);
      e->a = parse_or();  // condition
      e->b = std::move(expr1);
      if (skip_name("else")) e->c = parse_condexpr();
      expr1 = std::move(e);
      line = cur().line;
    }
    return expr1;
  }

  // One left-associative level: operands joined while take_op() consumes an operator
  // (its name; empty when the next token is none of the level's), each pair by join().
  template <typename Operand, typename TakeOp, typename Join>
  ExprPtr left_assoc(Operand operand, TakeOp take_op, Join join) {
    int line = cur().line;
    ExprPtr left = operand();
    ChainGuard chain(this);
    for (std::string op = take_op(); !op.empty(); op = take_op()) {
      chain.add();
      ExprPtr right = operand();
      left = join(op, std::move(left), std::move(right), line);
      line = cur().line;
    }
    return left;
  }

  ExprPtr logical(ExprKind kind, ExprPtr left, ExprPtr right, int line) {
    auto e = node(kind, line);
    e->a = std::move(left);
    e->b = std::move(right);
    return e;
  }

  ExprPtr parse_or() {
    return left_assoc([this] { return parse_and(); },
                      [this] { return std::string(skip_name("or") ? "or" : ""); },
                      [this](const std::string&, ExprPtr l, ExprPtr r, int line) {
                        return logical(ExprKind::kOr, std::move(l), std::move(r), line);
                      });
  }

  ExprPtr parse_and() {
    return left_assoc([this] { return parse_not(); },
                      [this] { return std::string(skip_name("and") ? "and" : ""); },
                      [this](const std::string&, ExprPtr l, ExprPtr r, int line) {
                        return logical(ExprKind::kAnd, std::move(l), std::move(r), line);
                      });
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      int line = next().line;
      DepthGuard guard(this);
      auto e = node(ExprKind::kNot, line);
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr expr = parse_math1();
    std::vector<std::pair<std::string, ExprPtr>> ops;
    while (true) {
      if (cur().type == Tok::kOp &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
           cur().text == ">" || cur().text == ">=")) {
        std::string op = next().text;
        ops.emplace_back(op, parse_math1());
      } else if (skip_name("in")) {
        ops.emplace_back("in", parse_math1());
      } else if (is_name("not") && peek().type == Tok::kName && peek().text == "in") {
        next();
        next();
        ops.emplace_back("notin", parse_math1());
      } else {
        break;
      }
      line = cur().line;
    }
    if (ops.empty()) return expr;
    auto e = node(ExprKind::kCompare, line);
    e->a = std::move(expr);
    e->ops = std::move(ops);
    return e;
  }

  ExprPtr binary(const std::string& op, ExprPtr left, ExprPtr right, int line) {
    auto e = node(ExprKind::kBinary, line);
    e->name = op;
    e->a = std::move(left);
    e->b = std::move(right);
    return e;
  }

  // The next token's text when it is one of `ops` (consumed), else empty.
  std::string take_op(std::initializer_list<const char*> ops) {
    for (const char* op : ops)
      if (is_op(op)) return next().text;
    return {};
  }

  ExprPtr parse_math1() {
    return left_assoc([this] { return parse_concat(); },
                      [this] {
                        return take_op({"+", "-"});
                      },
                      [this](const std::string& op, ExprPtr l, ExprPtr r, int line) {
                        return binary(op, std::move(l), std::move(r), line);
                      });
  }

  ExprPtr parse_concat() {
    int line = cur().line;
    std::vector<ExprPtr> args;
    args.push_back(parse_math2());
    while (skip_op("~")) args.push_back(parse_math2());
    if (args.size() == 1) return std::move(args[0]);
    auto e = node(ExprKind::kConcat, line);
    e->items = std::move(args);
    return e;
  }

  ExprPtr parse_math2() {
    return left_assoc([this] { return parse_pow(); },
                      [this] {
                        return take_op({"*", "/", "//", "%"});
                      },
                      [this](const std::string& op, ExprPtr l, ExprPtr r, int line) {
                        return binary(op, std::move(l), std::move(r), line);
                      });
  }

  ExprPtr parse_pow() {
    return left_assoc([this] { return parse_unary(true); }, [this] { return take_op({"**"}); },
                      [this](const std::string& op, ExprPtr l, ExprPtr r, int line) {
                        return binary(op, std::move(l), std::move(r), line);
                      });
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(this);
    int line = cur().line;
    ExprPtr n;
    if (skip_op("-")) {
      n = node(ExprKind::kNeg, line);
      n->a = parse_unary(false);
    } else if (skip_op("+")) {
      n = node(ExprKind::kPos, line);
      n->a = parse_unary(false);
    } else {
      n = parse_primary();
    }
    n = parse_postfix(std::move(n));
    if (with_filter) n = parse_filter_expr(std::move(n));
    return n;
  }

  ExprPtr parse_primary() {
    const Token& tok = cur();
    int line = tok.line;
    if (tok.type == Tok::kName) {
      next();
      auto e = node(ExprKind::kConst, line);
      if (tok.text == "true" || tok.text == "True") {
        e->value = Value::boolean(true);
      } else if (tok.text == "false" || tok.text == "False") {
        e->value = Value::boolean(false);
      } else if (tok.text == "none" || tok.text == "None") {
        e->value = Value::none();
      } else {
        e->kind = ExprKind::kName;
        e->name = tok.text;
      }
      return e;
    }
    if (tok.type == Tok::kString) {
      std::string s;
      while (cur().type == Tok::kString) s += next().text;  // adjacent literals concatenate
      auto e = node(ExprKind::kConst, line);
      e->value = Value::string(std::move(s));
      return e;
    }
    if (tok.type == Tok::kInt || tok.type == Tok::kFloat) {
      auto e = node(ExprKind::kConst, line);
      e->value =
          tok.type == Tok::kInt ? Value::integer(tok.int_value) : Value::number(tok.float_value);
      next();
      return e;
    }
    if (is_op("(")) {
      next();
      ExprPtr e = parse_tuple(false, true, {}, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      next();
      auto e = node(ExprKind::kList, line);
      while (!is_op("]")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op("]")) break;
        e->items.push_back(parse_expression(true));
      }
      expect_op("]");
      return e;
    }
    if (is_op("{")) {
      next();
      auto e = node(ExprKind::kDict, line);
      while (!is_op("}")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op("}")) break;
        e->items.push_back(parse_expression(true));
        expect_op(":");
        e->items.push_back(parse_expression(true));
      }
      expect_op("}");
      return e;
    }
    fail("unexpected '" + describe(tok) + "'");
  }

  ExprPtr parse_postfix(ExprPtr n) {
    ChainGuard chain(this);
    while (true) {
      chain.add();
      if (is_op(".") || is_op("[")) {
        n = parse_subscript(std::move(n));
      } else if (is_op("(")) {
        n = parse_call(std::move(n));
      } else {
        break;
      }
    }
    return n;
  }

  ExprPtr parse_filter_expr(ExprPtr n) {
    ChainGuard chain(this);
    while (true) {
      chain.add();
      if (is_op("|")) {
        n = parse_filter(std::move(n), false);
      } else if (is_name("is")) {
        n = parse_test(std::move(n));
      } else if (is_op("(")) {
        n = parse_call(std::move(n));
      } else {
        break;
      }
    }
    return n;
  }

  ExprPtr parse_subscript(ExprPtr n) {
    const Token& tok = next();
    int line = tok.line;
    if (tok.text == ".") {
      const Token& attr = next();
      if (attr.type == Tok::kName) {
        auto e = node(ExprKind::kGetattr, line);
        e->a = std::move(n);
        e->name = attr.text;
        return e;
      }
      if (attr.type != Tok::kInt) fail("expected name or number", attr.line);
      auto key = node(ExprKind::kConst, attr.line);
      key->value = Value::integer(attr.int_value);
      auto e = node(ExprKind::kGetitem, line);
      e->a = std::move(n);
      e->b = std::move(key);
      return e;
    }
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    auto e = node(ExprKind::kGetitem, line);
    e->a = std::move(n);
    if (args.size() == 1) {
      e->b = std::move(args[0]);
    } else {
      auto t = node(ExprKind::kTuple, line);
      t->items = std::move(args);
      e->b = std::move(t);
    }
    return e;
  }

  ExprPtr parse_subscribed() {
    int line = cur().line;
    ExprPtr start;
    if (is_op(":")) {
      next();
    } else {
      ExprPtr n = parse_expression(true);
      if (!is_op(":")) return n;
      next();
      start = std::move(n);
    }
    auto e = node(ExprKind::kSlice, line);
    e->a = std::move(start);
    if (!is_op(":") && !is_op("]") && !is_op(",")) e->b = parse_expression(true);
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) e->c = parse_expression(true);
    }
    return e;
  }

  void parse_call_args(CallArgsExpr* args) {
    int line = cur().line;
    expect_op("(");
    bool require_comma = false;
    auto ensure = [&](bool ok) {
      if (!ok) fail("invalid syntax for function call expression", line);
    };
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*")) {
        ensure(!args->star && !args->star_star);
        next();
        args->star = parse_expression(true);
      } else if (is_op("**")) {
        ensure(!args->star_star);
        next();
        args->star_star = parse_expression(true);
      } else if (cur().type == Tok::kName && peek().type == Tok::kOp && peek().text == "=") {
        ensure(!args->star_star);
        std::string key = next().text;
        next();
        args->kw.emplace_back(key, parse_expression(true));
      } else {
        ensure(!args->star && !args->star_star && args->kw.empty());
        args->pos.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = node(ExprKind::kCall, cur().line);
    e->a = std::move(callee);
    parse_call_args(&e->args);
    return e;
  }

  ExprPtr parse_filter(ExprPtr n, bool start_inline) {
    ChainGuard chain(this);
    while (is_op("|") || start_inline) {
      chain.add();
      if (!start_inline) next();
      start_inline = false;
      int line = cur().line;
      std::string name = expect_any_name();
      while (skip_op(".")) name += "." + expect_any_name();
      auto e = node(ExprKind::kFilter, line);
      e->a = std::move(n);
      e->name = name;
      if (is_op("(")) parse_call_args(&e->args);
      n = std::move(e);
    }
    return n;
  }

  ExprPtr parse_test(ExprPtr n) {
    int line = next().line;  // 'is'
    bool negated = skip_name("not");
    std::string name = expect_any_name();
    while (skip_op(".")) name += "." + expect_any_name();
    auto e = node(ExprKind::kTest, line);
    e->a = std::move(n);
    e->name = name;
    const Token& t = cur();
    if (is_op("(")) {
      parse_call_args(&e->args);
    } else if ((t.type == Tok::kName || t.type == Tok::kString || t.type == Tok::kInt ||
                t.type == Tok::kFloat || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("You cannot chain multiple tests with is");
      e->args.pos.push_back(parse_postfix(parse_primary()));
    }
    if (!negated) return e;
    auto no = node(ExprKind::kNot, line);
    no->a = std::move(e);
    return no;
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

namespace {

void target_names(const Target& t, std::vector<std::string>* out) {
  if (t.kind == Target::Kind::kName) out->push_back(t.name);
  if (t.kind == Target::Kind::kTuple)
    for (const auto& x : t.items) target_names(x, out);
}

bool has(const std::vector<std::string>& v, const std::string& n) {
  for (const auto& x : v)
    if (x == n) return true;
  return false;
}

}  // namespace

std::vector<std::string> frame_stores(const Body& body) {
  std::vector<std::string> out;
  for (const auto& s : body) {
    switch (s->kind) {
      case StmtKind::kSet:
      case StmtKind::kSetBlock:
        target_names(s->target, &out);
        break;
      case StmtKind::kMacro:
        out.push_back(s->text);
        break;
      case StmtKind::kIf: {
        std::vector<std::string> a = frame_stores(s->body), b = frame_stores(s->else_body);
        for (const auto& n : a)
          if (has(b, n)) out.push_back(n);
        break;
      }
      default:
        break;
    }
  }
  return out;
}

void annotate_frames(Body& body) {
  for (auto& s : body) {
    switch (s->kind) {
      case StmtKind::kFor:
      case StmtKind::kWith:
      case StmtKind::kMacro:
      case StmtKind::kCallBlock:
      case StmtKind::kFilterBlock:
      case StmtKind::kSetBlock:
        s->declared = frame_stores(s->body);
        break;
      default:
        break;
    }
    annotate_frames(s->body);
    annotate_frames(s->else_body);
  }
}

Body parse_template(const std::string& source) {
  Body body = Parser(tokenize(source)).parse();
  annotate_frames(body);
  return body;
}

}  // namespace pagoda::jinja
