// kernels/tokenizer/chat_template.cpp
// The DeepSeek-V3 chat template (tokenizer_config.json "chat_template") written out in C++ for
// conversations without tool calls:
//   BOS, every system prompt joined by "\n\n", then per turn
//   user       "<｜User｜>" + content
//   assistant  "<｜Assistant｜>" + content + EOS   ("<｜tool▁outputs▁end｜>" + content + EOS
//              right after tool outputs)
//   tool       "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>" + content + "<｜tool▁output▁end｜>"
//              for the conversation's first tool output, "\n<｜tool▁output▁begin｜>..." after that
//   and at the end "<｜tool▁outputs▁end｜>" if the last turn was a tool output, otherwise
//   "<｜Assistant｜>" when add_generation_prompt.
// The template never emits anything for "</think>" in assistant content: it is copied as is.
#include "config/model_config.hpp"
#include "kernels/tokenizer/tokenizer.hpp"

namespace moe {

std::string apply_chat_template(const std::vector<chat_message>& messages, bool add_generation_prompt) {
  std::string system_prompt;
  bool first_system = true;
  for (const chat_message& m : messages) {
    if (m.role == "system") {
      system_prompt += (first_system ? "" : "\n\n") + m.content;
      first_system = false;
    } else if (m.role != "user" && m.role != "assistant" && m.role != "tool") {
      throw input_error("chat message role '" + m.role + "' is not one of system, user, assistant, tool");
    }
  }

  std::string text = "<｜begin▁of▁sentence｜>" + system_prompt;
  bool after_tool = false;        // the template's ns.is_tool
  bool first_tool_output = true;  // ns.is_output_first: never reset
  for (const chat_message& m : messages) {
    if (m.role == "user") {
      after_tool = false;
      text += "<｜User｜>" + m.content;
    } else if (m.role == "assistant") {
      text += (after_tool ? "<｜tool▁outputs▁end｜>" : "<｜Assistant｜>") + m.content +
              "<｜end▁of▁sentence｜>";
      after_tool = false;
    } else if (m.role == "tool") {
      after_tool = true;
      text += (first_tool_output ? "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>"
                                 : "\n<｜tool▁output▁begin｜>") +
              m.content + "<｜tool▁output▁end｜>";
      first_tool_output = false;
    }
  }
  if (after_tool)
    text += "<｜tool▁outputs▁end｜>";
  else if (add_generation_prompt)
    text += "<｜Assistant｜>";
  return text;
}

}  // namespace moe
