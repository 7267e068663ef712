// WeChatPay: filled in by its issue.
